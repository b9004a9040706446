"""tapejax.saved_model (``train/saved_model``): save on jax.export, load in a fresh process without
the Python class, signatures, Variables, gradients, bad input.

Oracles: the saved object's own outputs and gradients (same inputs), TF 2.21's conventions
(signature names and output dicts, error classes: tests/parity/test_saved_model.py runs them)."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tapejax as tf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Model(tf.Module):
    def __init__(self):
        super().__init__()
        r = np.random.RandomState(0)
        self.w = tf.Variable(r.randn(3, 4).astype("float32"), name="w")
        self.b = tf.Variable(np.zeros(4, "float32"), name="b")
        self.scale = tf.Variable(2.0, trainable=False, name="scale")
        self.head = [tf.Variable(r.randn(4, 1).astype("float32"), name="head")]

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
    def __call__(self, x):
        h = tf.nn.relu(tf.matmul(x, self.w) + self.b) * self.scale
        return tf.matmul(h, self.head[0])

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x"),
                                  tf.TensorSpec([], tf.int32, name="k")])
    def features(self, x, k):
        h = tf.matmul(x, self.w)
        return {"hidden": h, "batch": tf.shape(x)[0] + k}


X1 = np.random.RandomState(1).randn(1, 3).astype("float32")
X5 = np.random.RandomState(2).randn(5, 3).astype("float32")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("sm") / "model")
    m = Model()
    tf.saved_model.save(m, d, signatures={"serving_default": m.__call__, "features": m.features})
    return d, m


def test_layout(saved):
    d, _ = saved
    assert sorted(os.listdir(d)) == ["functions", "saved_model.json", "variables"]
    index = json.load(open(os.path.join(d, "saved_model.json")))
    assert index["format"] == "tapejax-saved-model"
    assert sorted(index["functions"]) == ["call", "features"]
    assert index["attributes"] == {"__call__": "call", "features": "features"}
    assert index["signatures"] == {"serving_default": {"function": "call"}, "features": {"function": "features"}}
    assert index["functions"]["call"]["inputs"] == [{"name": "x", "shape": [None, 3], "dtype": "float32"}]


def test_loads_and_runs_in_a_fresh_process_without_the_class(saved):
    """A new interpreter that never defines Model: outputs equal the saved object's for two batch
    sizes (one program with a symbolic batch dimension)."""
    d, m = saved
    script = textwrap.dedent("""
        import json, sys, numpy as np
        import tapejax as tf
        loaded = tf.saved_model.load(sys.argv[1])
        x1, x5 = np.load(sys.argv[2]), np.load(sys.argv[3])
        out = {"y1": loaded(tf.constant(x1)).numpy().tolist(), "y5": loaded(tf.constant(x5)).numpy().tolist(),
               "sig": loaded.signatures["serving_default"](x=tf.constant(x5))["output_0"].numpy().tolist(),
               "features": int(loaded.features(tf.constant(x5), tf.constant(10))["batch"].numpy()),
               "names": sorted(loaded.signatures)}
        print("RESULT" + json.dumps(out))
    """)
    np.save(d + "-x1.npy", X1)
    np.save(d + "-x5.npy", X5)
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", script, d, d + "-x1.npy", d + "-x5.npy"], capture_output=True,
                       text=True, timeout=240, env=env, cwd="/")
    assert p.returncode == 0, p.stderr[-3000:]
    r = json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("RESULT")][-1][6:])
    np.testing.assert_allclose(r["y1"], m(tf.constant(X1)).numpy(), rtol=1e-6)
    np.testing.assert_allclose(r["y5"], m(tf.constant(X5)).numpy(), rtol=1e-6)
    np.testing.assert_allclose(r["sig"], m(tf.constant(X5)).numpy(), rtol=1e-6)
    assert r["features"] == 15 and r["names"] == ["features", "serving_default"]


def test_signatures_follow_tf_serving_conventions(saved):
    d, m = saved
    loaded = tf.saved_model.load(d)
    sig = loaded.signatures["serving_default"]
    out = sig(x=tf.constant(X5))
    assert list(out) == ["output_0"]
    np.testing.assert_allclose(out["output_0"].numpy(), m(tf.constant(X5)).numpy(), rtol=1e-6)
    np.testing.assert_allclose(sig(tf.constant(X5))["output_0"].numpy(), out["output_0"].numpy())   # positional
    feats = loaded.signatures["features"](x=tf.constant(X1), k=tf.constant(1))
    assert sorted(feats) == ["batch", "hidden"] and int(feats["batch"].numpy()) == 2
    assert list(sig.structured_input_signature[1]) == ["x"]


def test_default_signature_rule(tmp_path):
    """No `signatures`: the object's only input-signature function is serving_default (TF); with
    two there is none."""
    class One(tf.Module):
        def __init__(self):
            super().__init__()
            self.v = tf.Variable(3.0)

        @tf.function(input_signature=[tf.TensorSpec([], tf.float32)])
        def f(self, x):
            return x * self.v

    tf.saved_model.save(One(), str(tmp_path / "one"))
    assert sorted(tf.saved_model.load(str(tmp_path / "one")).signatures) == ["serving_default"]
    tf.saved_model.save(Model(), str(tmp_path / "two"))
    loaded = tf.saved_model.load(str(tmp_path / "two"))
    assert loaded.signatures == {} and float(loaded.features(tf.constant(X1), tf.constant(0))["batch"].numpy()) == 1


def test_variables_are_kept_assignable_and_differentiable(saved):
    d, m = saved
    loaded = tf.saved_model.load(d)
    np.testing.assert_array_equal(loaded.w.numpy(), m.w.numpy())
    assert [v.trainable for v in (loaded.w, loaded.b, loaded.scale, loaded.head[0])] == [True, True, False, True]
    assert len(loaded.trainable_variables) == 3
    x = tf.constant(X5)
    with tf.GradientTape() as t1:
        y1 = tf.reduce_sum(loaded(x))
    with tf.GradientTape() as t2:
        y2 = tf.reduce_sum(m(x))
    g1 = t1.gradient(y1, [loaded.w, loaded.b, loaded.head[0]])
    g2 = t2.gradient(y2, [m.w, m.b, m.head[0]])
    for a, b in zip(g1, g2):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
    loaded.scale.assign(0.0)   # the program runs on the Variables' current values
    np.testing.assert_array_equal(loaded(x).numpy(), np.zeros((5, 1), "float32"))


def test_checkpoint_restores_from_a_saved_model_directory(saved):
    """As TF: tf.train.Checkpoint(model).restore(saved_model_dir) reads its variables (a SavedModel
    has no save_counter, which restore() creates: TF's docs call expect_partial() here)."""
    d, m = saved
    fresh = Model()
    for v in fresh.variables:
        v.assign(tf.zeros_like(v))
    status = tf.train.Checkpoint(fresh).restore(d).expect_partial()
    status.assert_nontrivial_match()
    assert [id(o) for o in status._unmatched_objects()] == [id(fresh_ck_counter(status))]
    np.testing.assert_allclose(fresh(tf.constant(X5)).numpy(), m(tf.constant(X5)).numpy(), rtol=1e-6)


def test_checkpoint_restores_from_tfs_variables_prefix_of_a_saved_model(saved):
    """TF's spelling of a SavedModel's checkpoint, ``DIR/variables/variables``, reads the same values
    (it was NotFoundError); ``list_variables`` reads it too."""
    d, m = saved
    fresh = Model()
    for v in fresh.variables:
        v.assign(tf.zeros_like(v))
    prefix = os.path.join(d, "variables", "variables")
    tf.train.Checkpoint(fresh).restore(prefix).expect_partial().assert_nontrivial_match()
    np.testing.assert_allclose(fresh(tf.constant(X5)).numpy(), m(tf.constant(X5)).numpy(), rtol=1e-6)
    assert "w/.ATTRIBUTES/VARIABLE_VALUE" in dict(tf.train.list_variables(prefix))


def fresh_ck_counter(status):
    return status._root.save_counter


def test_saving_again_replaces_the_directory(tmp_path):
    d = str(tmp_path / "m")
    m = Model()
    tf.saved_model.save(m, d)
    m.b.assign(tf.ones([4]))
    tf.saved_model.save(m, d)
    np.testing.assert_array_equal(tf.saved_model.load(d).b.numpy(), np.ones(4, "float32"))


def test_bad_input(tmp_path, saved):
    d, m = saved
    with pytest.raises(ValueError, match="Expected an object of type `Trackable`"):
        tf.saved_model.save(3, str(tmp_path / "a"))
    with pytest.raises(ValueError, match="Expected an object of type `Trackable`"):
        tf.saved_model.save(tf.Variable(1.0), str(tmp_path / "a"))
    (tmp_path / "file").write_text("x")
    with pytest.raises(tf.errors.FailedPreconditionError, match="is not a directory"):
        tf.saved_model.save(m, str(tmp_path / "file"))
    plain = tf.function(lambda x: x)
    with pytest.raises(ValueError, match="Only `tf.functions` with an input signature"):
        tf.saved_model.save(m, str(tmp_path / "b"), signatures=plain)
    with pytest.raises(ValueError, match="Only `tf.functions` with an input signature"):
        tf.saved_model.save(m, str(tmp_path / "b"), signatures={"s": 3})
    with pytest.raises(ValueError, match="format"):
        tf.saved_model.save(m, str(tmp_path / "b"), format="onnx")
    assert not os.path.exists(tmp_path / "a") and not os.path.exists(tmp_path / "b")
    for bad in (str(tmp_path / "none"), str(tmp_path / "file"), str(tmp_path)):
        with pytest.raises(OSError, match="SavedModel file does not exist at"):
            tf.saved_model.load(bad)
    loaded = tf.saved_model.load(d)
    with pytest.raises(TypeError, match=r"Can not cast TensorSpec\(shape=\(1, 3\), dtype=tf.int32"):
        loaded(tf.constant([[1, 2, 3]]))
    with pytest.raises(TypeError, match="Can not cast"):
        loaded(tf.constant(X1[:, :2]))
    with pytest.raises(TypeError, match="its signature has 1 argument"):
        loaded(tf.constant(X1), tf.constant(X1))
    with pytest.raises(TypeError, match="unknown"):
        loaded.signatures["serving_default"](y=tf.constant(X1))


def test_signature_functions_must_not_assign(tmp_path):
    class Counter(tf.Module):
        def __init__(self):
            super().__init__()
            self.n = tf.Variable(0.0)

        @tf.function(input_signature=[tf.TensorSpec([], tf.float32)])
        def __call__(self, x):
            self.n.assign_add(x)
            return self.n.read_value()

    with pytest.raises(ValueError, match="assigns Variable"):
        tf.saved_model.save(Counter(), str(tmp_path / "c"))


def test_two_inputs_whose_unknown_batch_sizes_the_program_relates(tmp_path):
    """``x @ w - y`` with signatures [None, 3] and [None, 1]: TF lets the unknown sizes agree; the
    export traces the first axes again as one batch size (independent symbols cannot broadcast)."""
    class Loss(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(np.ones((3, 1), np.float32))

        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32), tf.TensorSpec([None, 1], tf.float32)])
        def loss(self, x, y):
            return tf.reduce_mean(tf.square(tf.matmul(x, self.w) - y))

    m = Loss()
    tf.saved_model.save(m, str(tmp_path / "l"))
    loaded = tf.saved_model.load(str(tmp_path / "l"))
    for n in (2, 5):
        x, y = X5[:n], np.arange(n, dtype=np.float32)[:, None]
        np.testing.assert_allclose(loaded.loss(x, y).numpy(), m.loss(x, y).numpy(), rtol=1e-6)


class _Picker(tf.Module):
    def __init__(self):
        super().__init__()
        self.w = tf.Variable(np.arange(6, dtype=np.float32).reshape(3, 2))

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32), tf.TensorSpec([None], tf.int32)])
    def pick(self, x, ids):
        return tf.gather(tf.matmul(x, self.w), ids, axis=1, batch_dims=1)


@pytest.mark.parametrize("fmt", ["jax", "tf"])
def test_unknown_batch_sizes_related_by_a_gather_or_a_keras_concatenate(tmp_path, fmt):
    """Two ``None`` batch sizes the program relates by ``gather(..., batch_dims=1)`` (a ValueError
    at the trace with independent symbols) are traced again as one batch size, in both formats
    (before, only an InvalidArgumentError was retried: save raised ValueError); the TF format
    shares a Keras model's batch size as the jax format does (its Concatenate raised TypeError)
    and its loaded call takes the inputs as one list, as the model's call."""
    realtf = pytest.importorskip("tensorflow") if fmt == "tf" else None
    m = _Picker()
    tf.saved_model.save(m, str(tmp_path / "p"), format=fmt)
    x = X5[:4]
    ids = np.array([0, 1, 1, 0], np.int32)
    loaded = (realtf or tf).saved_model.load(str(tmp_path / "p"))
    np.testing.assert_allclose(loaded.pick(x, ids).numpy(), m.pick(x, ids).numpy(), rtol=1e-6)
    if realtf is None:
        return
    a, b = tf.keras.Input((3,), name="a"), tf.keras.Input((2,), name="b")
    k = tf.keras.Model([a, b], tf.keras.layers.Dense(1)(tf.keras.layers.Concatenate()([a, b])))
    tf.saved_model.save(k, str(tmp_path / "k"), format="tf")
    loaded = realtf.saved_model.load(str(tmp_path / "k"))
    want = k([x, x[:, :2]]).numpy()
    out = loaded.signatures["serving_default"](a=realtf.constant(x), b=realtf.constant(x[:, :2]))
    np.testing.assert_allclose(out["output_0"].numpy(), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(loaded([x, x[:, :2]]).numpy(), want, rtol=1e-5, atol=1e-6)


def test_a_loaded_model_saved_again_keeps_its_functions_and_signatures(saved, tmp_path):
    """TF saves a loaded object with its functions and signatures; the second load serves the
    Variables' values at the second save."""
    d, m = saved
    first = tf.saved_model.load(d)
    first.w.assign_add(tf.ones([3, 4]) * 0.5)
    tf.saved_model.save(first, str(tmp_path / "again"))
    second = tf.saved_model.load(str(tmp_path / "again"))
    assert sorted(second.signatures) == ["features", "serving_default"]
    np.testing.assert_allclose(second(X5).numpy(), first(X5).numpy(), rtol=1e-6)
    np.testing.assert_allclose(second.features(X5, 2)["hidden"].numpy(), first.features(X5, 2)["hidden"].numpy(),
                               rtol=1e-6)
    np.testing.assert_allclose(second.signatures["serving_default"](x=X1)["output_0"].numpy(), first(X1).numpy(),
                               rtol=1e-6)
    assert not np.allclose(second(X5).numpy(), m(X5).numpy())


@pytest.mark.parametrize("fmt", ["jax", "tf"])
def test_nested_objects_functions_are_exported_by_their_path(tmp_path, fmt):
    """TF saves every tracked object's functions: ``loaded.encoder.encode`` and a nested list
    element's ``__call__`` run after loading; the root's ``__call__`` calls the nested function
    (a function called inside a program traced with symbolic sizes).  The TF format too, loaded
    by TF (before, it held the root's functions only)."""
    realtf = pytest.importorskip("tensorflow") if fmt == "tf" else None
    class Encoder(tf.Module):
        def __init__(self, seed):
            super().__init__()
            self.w = tf.Variable(np.random.RandomState(seed).randn(3, 2).astype("float32"))

        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
        def encode(self, x):
            return tf.tanh(tf.matmul(x, self.w))

        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
        def __call__(self, x):
            return self.encode(x) * 2.0

    class Outer(tf.Module):
        def __init__(self):
            super().__init__()
            self.encoder = Encoder(0)
            self.heads = [Encoder(1)]

        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
        def __call__(self, x):
            return self.encoder.encode(x) + self.heads[0](x)

    m = Outer()
    tf.saved_model.save(m, str(tmp_path / "o"), format=fmt)
    loaded = (realtf or tf).saved_model.load(str(tmp_path / "o"))
    for got, want in [(loaded(X5), m(X5)), (loaded.encoder.encode(X1), m.encoder.encode(X1)),
                      (loaded.heads[0](X5), m.heads[0](X5)), (loaded.heads[0].encode(X5), m.heads[0].encode(X5))]:
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
    assert sorted(loaded.signatures) == ["serving_default"]


def test_an_exported_function_is_converted_by_autograph(tmp_path):
    """As ``tapejax.function`` traces it: ``for i in tf.range(k)`` on an input and ``if`` on a
    tensor become a loop and a cond in the exported program (the raw Python raised
    TracerArrayConversionError at save)."""
    class Count(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(2.0)

        @tf.function(input_signature=[tf.TensorSpec([], tf.int32)])
        def total(self, k):
            acc = tf.constant(0.0)
            for i in tf.range(k):
                if i % 2 == 0:
                    acc += tf.cast(i, tf.float32) * self.w
            return acc

    tf.saved_model.save(Count(), str(tmp_path / "c"))
    loaded = tf.saved_model.load(str(tmp_path / "c"))
    assert float(loaded.total(5)) == 12.0 and float(loaded.total(0)) == 0.0


def test_a_program_with_a_runtime_check_is_exported_and_the_loaded_call_raises_when_it_fails(tmp_path):
    """A TensorArray write at an index from an input is checked at run time (TF's kernel error):
    the export functionalizes the check (it raised "checkify.check which was not functionalized"
    at save) and the loaded call raises InvalidArgumentError when it fails."""
    class Put(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(2.0)

        @tf.function(input_signature=[tf.TensorSpec([], tf.int32)])
        def put(self, i):
            ta = tf.TensorArray(tf.float32, size=3)
            for j in tf.range(3):
                ta = ta.write(j, 0.0)
            ta = ta.write(i, self.w)
            return ta.stack()

    tf.saved_model.save(Put(), str(tmp_path / "p"))
    loaded = tf.saved_model.load(str(tmp_path / "p"))
    np.testing.assert_array_equal(loaded.put(1).numpy(), [0.0, 2.0, 0.0])
    with pytest.raises(tf.errors.InvalidArgumentError, match="runtime check"):
        loaded.put(5)


def test_not_callable_without_call(tmp_path):
    class F(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([2], tf.float32)])
        def f(self, x):
            return x + 1.0

    tf.saved_model.save(F(), str(tmp_path / "f"))
    loaded = tf.saved_model.load(str(tmp_path / "f"))
    np.testing.assert_array_equal(loaded.f(tf.constant([1.0, 2.0])).numpy(), [2.0, 3.0])
    with pytest.raises(TypeError, match="not callable"):
        loaded(tf.constant([1.0, 2.0]))


class _DropoutModule(tf.Module):
    """A module whose exported function draws from the global random stream (unseeded dropout)."""

    def __init__(self):
        self.w = tf.Variable(np.ones((3, 2), np.float32))

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
    def __call__(self, x):
        return tf.nn.dropout(tf.matmul(x, self.w), 0.5)


def test_a_function_drawing_from_the_global_random_stream_draws_anew_at_each_loaded_call(tmp_path):
    """An unseeded draw (dropout) is exported with a key input; the loaded function draws a fresh
    key from the global stream at every call (new masks each call, as TF's stateful ops), and
    set_seed makes the calls repeat."""
    m = _DropoutModule()
    x = tf.ones([64, 3])
    tf.saved_model.save(m, str(tmp_path / "m"))
    r = tf.saved_model.load(str(tmp_path / "m"))
    tf.random.set_seed(11)
    a, b = r(x).numpy(), r(x).numpy()
    assert set(np.unique(a)) <= {0.0, 6.0} and 0 < (a == 0).mean() < 1
    assert not np.array_equal(a, b)
    tf.random.set_seed(11)
    np.testing.assert_array_equal(r(x).numpy(), a)
    tf.random.set_seed(None)


def test_the_tf_format_export_refuses_a_function_drawing_from_the_global_stream(tmp_path):
    """The TF-format export (jax2tf) cannot carry the global random stream: TF's
    UnimplementedError naming the function and the way out."""
    pytest.importorskip("tensorflow")

    with pytest.raises(tf.errors.UnimplementedError, match="draws from the global random stream.*`seed`"):
        tf.saved_model.export_tf(_DropoutModule(), str(tmp_path / "m"))


def test_the_tf_format_export_refuses_what_this_tensorflow_cannot_read(tmp_path, monkeypatch):
    """Where TensorFlow's StableHLO is older than JAX's (TF 2.21 with JAX 0.11 cannot read the
    shape assertions of None sizes), the TF-format export says so before writing anything,
    rather than leaving a SavedModel that fails in TF at its first call.  ``_runs`` is what finds
    out: TF's deserialization error only, not the function's own errors."""
    realtf = pytest.importorskip("tensorflow")
    from tapejax.train.saved_model import tf_export

    def failing(msg):
        def t(*args):
            raise realtf.errors.InvalidArgumentError(None, None, msg)
        return t
    specs = [realtf.TensorSpec([None, 3], realtf.float32)]
    assert not tf_export._runs(realtf, failing("Cannot deserialize computation: unregistered operation"), specs)
    assert tf_export._runs(realtf, failing("Input is not invertible."), specs)
    assert tf_export._runs(realtf, lambda x: x * 2, specs)
    monkeypatch.setattr(tf_export, "_runs", lambda *a: False)
    d = tmp_path / "m"
    with pytest.raises(RuntimeError, match="cannot read the shape assertions that JAX .* None sizes in the input_signature of 'call'"):
        tf.saved_model.export_tf(Model(), str(d))
    assert not d.exists()


def test_the_tf_format_keeps_variables_at_their_paths_and_tf_differentiates_the_loaded_call(tmp_path):
    """Loaded by TensorFlow in a fresh process, a TF-format SavedModel has the object's Variables
    where TF's own SavedModel of it has them (``loaded.w``, ``loaded.head[0]``; ``scale`` not
    trainable), and a ``GradientTape`` over a loaded call gives tapejax's gradients (jax2tf's
    converted gradient is saved with the model; before, the attributes were missing and the
    tape raised LookupError "does not support gradients")."""
    pytest.importorskip("tensorflow")
    m, d = Model(), str(tmp_path / "m")
    tf.saved_model.save(m, d, format="tf")
    script = textwrap.dedent("""
        import json, sys, numpy as np
        import tensorflow as tf
        loaded = tf.saved_model.load(sys.argv[1])
        x = tf.constant(np.load(sys.argv[2]))
        vs = [loaded.w, loaded.b, loaded.head[0]]
        with tf.GradientTape() as t:
            loss = tf.reduce_sum(tf.square(loaded(x)))
        g = t.gradient(loss, vs + [loaded.scale])
        out = {"w": loaded.w.numpy().tolist(), "trainable": [v.trainable for v in vs + [loaded.scale]],
               "grads": [None if x is None else x.numpy().tolist() for x in g]}
        print("RESULT" + json.dumps(out))
    """)
    np.save(d + "-x5.npy", X5)
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", script, d, d + "-x5.npy"], capture_output=True, text=True,
                       timeout=240, env=env, cwd="/")
    assert p.returncode == 0, p.stderr[-3000:]
    r = json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("RESULT")][-1][6:])
    vs = [m.w, m.b, m.head[0], m.scale]
    with tf.GradientTape() as t:
        loss = tf.reduce_sum(tf.square(m(tf.constant(X5))))
    want = t.gradient(loss, vs)
    np.testing.assert_array_equal(r["w"], m.w.numpy())
    assert r["trainable"] == [True, True, True, False]
    assert want[3] is None and r["grads"][3] is None   # (a non-trainable Variable is not watched)
    for got, w in zip(r["grads"][:3], want[:3]):
        np.testing.assert_allclose(got, w.numpy(), rtol=1e-5, atol=1e-6)


def test_save_options_experimental_custom_gradients_is_kept_and_the_loaded_gradient_is_the_custom_one(tmp_path):
    """``SaveOptions(experimental_custom_gradients=...)`` (TF's default True) is an attribute; loaded in
    the saving process, TF differentiates a function saved either way with its custom gradient (found
    in its gradient registry), and so does tapejax (the artifact holds its first derivative)."""
    assert tf.saved_model.SaveOptions().experimental_custom_gradients is True

    @tf.custom_gradient
    def scaled(x):
        return x * x, lambda dy: dy * 100.0

    class M(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([], tf.float32)])
        def f(self, x):
            return scaled(x)

    for keep in (True, False):
        opts = tf.saved_model.SaveOptions(experimental_custom_gradients=keep)
        assert opts.experimental_custom_gradients is keep
        d = str(tmp_path / f"m{keep}")
        tf.saved_model.save(M(), d, options=opts)
        loaded = tf.saved_model.load(d)
        x = tf.constant(2.0)
        with tf.GradientTape() as t:
            t.watch(x)
            y = loaded.f(x)
        assert (y.numpy(), t.gradient(y, x).numpy()) == (4.0, 100.0)
