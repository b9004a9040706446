"""Round 18c, second file: SavedModels exchanged between TensorFlow 2.21 and tapejax, and round trips.

``tapejax.saved_model.save(obj, path, format="tf")`` writes a TensorFlow SavedModel through
jax2tf.  The oracle is TF's own SavedModel of the same program: both are loaded by
``tf.saved_model.load`` in this process and compared (signatures' input and output names,
values for two batch sizes, Variables at their attribute paths, fine-tuning with a
``GradientTape``).  Round trips: a TF checkpoint restored by tapejax and exported back to TF keeps
its values; a model trained half in TF and half in tapejax equals one trained wholly in TF.
"""

import numpy as np
import pytest

from .test_user_programs18c import X, Y, close, make_model, outcome, train, values

realtf = pytest.importorskip("tensorflow", reason="TensorFlow is not installed")
_SYMBOLIC: dict = {}
import tapejax  # noqa: E402


@pytest.fixture
def symbolic_tf_export(tmp_path_factory):
    """Skip where this TensorFlow cannot read the shape assertions this JAX exports for ``None``
    sizes (TF 2.21 with JAX 0.12: ``tf_export`` then raises its RuntimeError, tested in
    ``tests/test_saved_model.py``); probed once with a one-Variable module."""
    if "ok" not in _SYMBOLIC:
        m = tapejax.Module()
        m.v = tapejax.Variable(2.0)
        fn = tapejax.function(lambda x: x * m.v, input_signature=[tapejax.TensorSpec([None], tapejax.float32)])
        try:
            tapejax.saved_model.save(m, str(tmp_path_factory.mktemp("probe")), signatures=fn, format="tf")
            _SYMBOLIC["ok"] = True
        except RuntimeError as e:
            if "cannot read the shape assertions" not in str(e):
                raise
            _SYMBOLIC["ok"] = False
    if not _SYMBOLIC["ok"]:
        pytest.skip("this TensorFlow cannot read the shape assertions this JAX exports (format='tf' with None sizes)")


def serving_module(tf):
    """A Module with a ``__call__`` and a dict-returning method, both with input signatures."""
    class Net(tf.Module):
        def __init__(self):
            super().__init__()
            r = np.random.RandomState(4)
            self.encoder = tf.Module()
            self.encoder.w = tf.Variable(r.randn(3, 4).astype("float32"), name="w")
            self.heads = [tf.Variable(r.randn(4, 2).astype("float32"), name="h0"),
                          tf.Variable(r.randn(4, 1).astype("float32"), name="h1")]
            self.temperature = tf.Variable(2.0, trainable=False, name="temperature")

        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="features")])
        def __call__(self, x):
            return tf.matmul(tf.tanh(tf.matmul(x, self.encoder.w)), self.heads[0]) / self.temperature

        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="features"),
                                      tf.TensorSpec([None], tf.int32, name="ids")])
        def score(self, x, ids):
            h = tf.tanh(tf.matmul(x, self.encoder.w))
            logits = tf.matmul(h, self.heads[0])
            return {"probs": tf.nn.softmax(logits), "picked": tf.gather(logits, ids, axis=1, batch_dims=1),
                    "value": tf.squeeze(tf.matmul(h, self.heads[1]), -1)}

    return Net()


def save_both(tmp_path, signatures=True):
    """The same Net saved by TF and by tapejax (format="tf"), each loaded by TF: (TF's, tapejax's, jm)."""
    tm, jm = serving_module(realtf), serving_module(tapejax)
    kw = (lambda m: {"signatures": {"serving_default": m.__call__, "score": m.score}}) if signatures else (lambda m: {})
    realtf.saved_model.save(tm, str(tmp_path / "tf"), **kw(tm))
    tapejax.saved_model.save(jm, str(tmp_path / "tapejax"), format="tf", **kw(jm))
    return realtf.saved_model.load(str(tmp_path / "tf")), realtf.saved_model.load(str(tmp_path / "tapejax")), jm


def by_key(d):
    return {k: d[k].numpy() for k in sorted(d)}


def test_tapejax_saved_model_served_by_tf_as_tfs_own(tmp_path, symbolic_tf_export):
    """TF Serving's view: the signatures' names, named inputs and output names and specs of the
    tapejax-written SavedModel are those of TF's own SavedModel of the program, and both give the
    same outputs for batch sizes 1 and 5 (one symbolic batch size); ``loaded(x)`` and
    ``loaded.score(x, ids)`` too, and tapejax's own calls."""
    want, got, jm = save_both(tmp_path)
    assert sorted(got.signatures) == sorted(want.signatures) == ["score", "serving_default"]
    for name in want.signatures:
        assert got.signatures[name].structured_input_signature == want.signatures[name].structured_input_signature
        assert got.signatures[name].structured_outputs == want.signatures[name].structured_outputs
    for n in (1, 5):
        x, ids = realtf.constant(X[:n]), realtf.constant(np.arange(n, dtype="int32") % 2)
        close([got.signatures["serving_default"](features=x)["output_0"]],
              [want.signatures["serving_default"](features=x)["output_0"]])
        g, w = by_key(got.signatures["score"](features=x, ids=ids)), by_key(want.signatures["score"](features=x, ids=ids))
        assert list(g) == list(w) == ["picked", "probs", "value"]
        close(list(g.values()), list(w.values()))
        close([got(x), got.score(x, ids)["value"]], [want(x), want.score(x, ids)["value"]])
        close([got(x)], [jm(tapejax.constant(X[:n]))])
    assert outcome(lambda: got(realtf.constant(X[:, :2]))) == outcome(lambda: want(realtf.constant(X[:, :2])))


def test_loaded_variables_are_at_tfs_paths_and_fine_tune_in_tf(tmp_path, symbolic_tf_export):
    """The loaded object's Variables where TF's own SavedModel has them (``loaded.encoder.w``,
    ``loaded.heads[1]``, ``temperature`` not trainable), and fine-tuning the loaded model in TF
    with a ``GradientTape`` and SGD gives the losses and weights of TF's own loaded model."""
    want, got, _ = save_both(tmp_path, signatures=False)

    def variables(m):
        return [m.encoder.w, m.heads[0], m.heads[1], m.temperature]

    assert [v.trainable for v in variables(got)] == [v.trainable for v in variables(want)] == [True] * 3 + [False]
    close(variables(got), variables(want), rtol=0, atol=0)

    def fine_tune(m):
        opt, out = realtf.keras.optimizers.SGD(0.1), []
        vs = variables(m)[:2]
        for _ in range(3):
            with realtf.GradientTape() as t:
                loss = realtf.reduce_mean(realtf.square(m(realtf.constant(X)) - Y))
            g = t.gradient(loss, vs + [m.temperature])
            opt.apply_gradients(zip(g[:2], vs))
            out.append((float(loss.numpy()), g[2] is None))
        return out, [v.numpy() for v in vs]

    (gl, gv), (wl, wv) = fine_tune(got), fine_tune(want)
    assert [n for _, n in gl] == [n for _, n in wl] == [True] * 3
    np.testing.assert_allclose([v for v, _ in gl], [v for v, _ in wl], rtol=1e-5)
    close(gv, wv)


def test_keras_model_exported_for_serving(tmp_path, symbolic_tf_export):
    """A tapejax Keras functional model with two named inputs, trained a few steps with tapejax's
    Adam, exported with ``format="tf"``: TF serves it by its inputs' names for two batch sizes,
    with tapejax's predictions; the loaded call takes the inputs as one list."""
    keras = tapejax.keras
    a, b = keras.Input((3,), name="numeric"), keras.Input((2,), name="extra")
    h = keras.layers.Dense(8, activation="relu")(keras.layers.Concatenate()([a, b]))
    model = keras.Model([a, b], keras.layers.Dense(2)(keras.layers.BatchNormalization()(h)))
    opt = keras.optimizers.Adam(0.01)
    xb = np.random.RandomState(7).randn(8, 2).astype("float32")
    for _ in range(3):
        with tapejax.GradientTape() as t:
            loss = tapejax.reduce_mean(tapejax.square(model([X, xb], training=True) - Y))
        opt.apply_gradients(zip(t.gradient(loss, model.trainable_variables), model.trainable_variables))
    tapejax.saved_model.save(model, str(tmp_path / "k"), format="tf")
    loaded = realtf.saved_model.load(str(tmp_path / "k"))
    serve = loaded.signatures["serving_default"]
    assert sorted(serve.structured_input_signature[1]) == ["extra", "numeric"]
    for n in (1, 6):
        out = serve(numeric=realtf.constant(X[:n]), extra=realtf.constant(xb[:n]))
        want = model([X[:n], xb[:n]], training=False).numpy()
        assert list(out) == ["output_0"]
        np.testing.assert_allclose(out["output_0"].numpy(), want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(loaded([realtf.constant(X[:n]), realtf.constant(xb[:n])]).numpy(), want,
                                   rtol=1e-5, atol=1e-6)


def test_what_each_loader_says_to_the_other_systems_saved_model(tmp_path):
    """TF's ``tf.saved_model.load`` of tapejax's own format (``format="jax"``: no
    ``saved_model.pb``) raises OSError; tapejax's ``saved_model.load`` reads TF's SavedModel (TF
    reads it, tf2jax converts its functions: ``test_tf_savedmodel_load.py``), calls it as TF's
    loaded object does; a TF SavedModel's Variables also restore into tapejax through
    ``Checkpoint(model).read(path/variables/variables)``."""
    tm, jm = serving_module(realtf), serving_module(tapejax)
    realtf.saved_model.save(tm, str(tmp_path / "tf"))
    tapejax.saved_model.save(jm, str(tmp_path / "jax"))
    assert outcome(lambda: realtf.saved_model.load(str(tmp_path / "jax"))) == "OSError"
    loaded = tapejax.saved_model.load(str(tmp_path / "tf"))
    close(loaded(X), realtf.saved_model.load(str(tmp_path / "tf"))(X))
    for v in jm.trainable_variables:
        v.assign(v * 0)
    tapejax.train.Checkpoint(jm).read(str(tmp_path / "tf" / "variables" / "variables")).assert_consumed()
    close(jm.trainable_variables, tm.trainable_variables, rtol=0, atol=0)


# -- round trips --------------------------------------------------------------------------------------
def export_for_tf(m, path):
    """tapejax's model ``m`` (``make_model``) as a TF SavedModel serving its call."""
    fn = tapejax.function(lambda x: m(x), input_signature=[tapejax.TensorSpec([None, 3], tapejax.float32, name="x")])
    tapejax.saved_model.save(m, path, signatures=fn, format="tf")


def test_checkpoint_tf_to_tapejax_to_tf_keeps_its_values(tmp_path, symbolic_tf_export):
    """TF's checkpoint restored into tapejax and exported back as a SavedModel: TF restores the
    SavedModel's ``variables/variables`` into a fresh TF model (``Checkpoint(model).read``) with the
    values it saved, and the served call is TF's model's."""
    tm = make_model(realtf)
    train(realtf, tm, realtf.keras.optimizers.legacy.Adam(0.05), 2)
    path = realtf.train.Checkpoint(model=tm).save(str(tmp_path / "ckpt"))
    jm = make_model(tapejax)
    tapejax.train.Checkpoint(model=jm).restore(path).assert_consumed()
    export_for_tf(jm, str(tmp_path / "sm"))

    back = make_model(realtf)
    back.step = realtf.Variable(0, trainable=False, name="step")   # (tapejax's int64 is int32 without x64)
    realtf.train.Checkpoint(back).read(str(tmp_path / "sm" / "variables" / "variables")).assert_existing_objects_matched()
    close(values(back), values(tm), rtol=0, atol=0)
    assert int(back.step.numpy()) == int(tm.step.numpy()) == 2
    served = realtf.saved_model.load(str(tmp_path / "sm")).signatures["serving_default"](x=realtf.constant(X))
    close([served["output_0"]], [tm(realtf.constant(X))])


def test_trained_half_in_tf_half_in_tapejax_equals_wholly_in_tf(tmp_path, symbolic_tf_export):
    """Legacy Adam: 3 steps in TF, checkpoint, 3 steps in tapejax from it, exported to TF: the
    loaded Variables and predictions are those of the same model trained 6 steps in TF."""
    whole, wopt = make_model(realtf), realtf.keras.optimizers.legacy.Adam(0.05)
    train(realtf, whole, wopt, 3)
    path = realtf.train.Checkpoint(model=whole, optimizer=wopt).save(str(tmp_path / "ckpt"))
    want = train(realtf, whole, wopt, 3)

    jm, jopt = make_model(tapejax), tapejax.keras.optimizers.legacy.Adam(0.05)
    tapejax.train.Checkpoint(model=jm, optimizer=jopt).restore(path).assert_existing_objects_matched()
    np.testing.assert_allclose(train(tapejax, jm, jopt, 3), want, rtol=2e-5)
    export_for_tf(jm, str(tmp_path / "sm"))
    loaded = realtf.saved_model.load(str(tmp_path / "sm"))
    close([loaded.layers[i].w for i in (0, 1)] + [loaded.layers[i].b for i in (0, 1)],
          [whole.layers[i].w for i in (0, 1)] + [whole.layers[i].b for i in (0, 1)])
    close([loaded.signatures["serving_default"](x=realtf.constant(X))["output_0"]], [whole(realtf.constant(X))])
