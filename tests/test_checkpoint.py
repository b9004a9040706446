"""tapejax.train.Checkpoint (``checkpoint.py``, ``graph.py``): round trips of Variables, Modules and
optimizers, TF's keys and numbering, save/write/read/restore, options, bad input.

Oracles: the values saved (a restored object equals the saved one bit for bit), the training
run continued without a checkpoint (a resumed run gives the same losses), and TF's behaviour
(checked with TF 2.21; the parity versions are in tests/parity/test_checkpoint.py)."""
import collections
import os

import numpy as np
import optax
import pytest

import tapejax as tf
from tapejax.train import graph as _g


class Dense(tf.Module):
    def __init__(self, i, o, name=None):
        super().__init__(name=name)
        rng = np.random.RandomState(i * 10 + o)
        self.w = tf.Variable(rng.randn(i, o).astype("float32"), name="w")
        self.b = tf.Variable(np.zeros(o, "float32"), name="b")

    def __call__(self, x):
        return tf.matmul(x, self.w) + self.b


class Net(tf.Module):
    def __init__(self):
        super().__init__()
        self.layers = [Dense(3, 4), Dense(4, 1)]

    def __call__(self, x):
        return self.layers[1](tf.nn.relu(self.layers[0](x)))


X = tf.constant(np.random.RandomState(0).randn(8, 3).astype("float32"))
Y = tf.constant(np.random.RandomState(1).randn(8, 1).astype("float32"))


def _train(model, opt, steps, compiled=True):
    def step():
        with tf.GradientTape() as t:
            loss = tf.reduce_mean(tf.square(model(X) - Y))
        opt.apply_gradients(zip(t.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss
    fn = tf.function(step) if compiled else step
    return [float(fn().numpy()) for _ in range(steps)]


OPTIMIZERS = {
    "nadam": lambda: tf.optimizers.Nadam(0.01),   # slots and an extra Variable (momentum_cache)
    "adam-amsgrad": lambda: tf.optimizers.Adam(0.01, amsgrad=True),
    "sgd-momentum": lambda: tf.optimizers.SGD(0.05, momentum=0.9),
    "rmsprop-centered": lambda: tf.optimizers.RMSprop(0.01, momentum=0.5, centered=True),
    "ftrl": lambda: tf.optimizers.Ftrl(0.05),
    "optax-adamw": lambda: tf.optimizers.from_optax(optax.adamw(0.01)),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_resume_training_exactly(tmp_path, name):
    """Train 3 steps, save, train 3 more; a fresh model + optimizer restored from the save gives
    the same 3 losses and Variables (the state restored when the first update makes it, by
    position in tf_keras' lists; an optax state by the restore)."""
    make = OPTIMIZERS[name]
    model, opt = Net(), make()
    _train(model, opt, 3)
    path = tf.train.Checkpoint(model=model, optimizer=opt).save(str(tmp_path / "ckpt"))
    assert path == str(tmp_path / "ckpt-1")
    want = _train(model, opt, 3)

    model2, opt2 = Net(), make()
    status = tf.train.Checkpoint(model=model2, optimizer=opt2).restore(path)
    status.assert_existing_objects_matched()   # (a new optimizer's state: at its first update, below)
    assert int(opt2.iterations.numpy()) == 3
    got = _train(model2, opt2, 3)
    status.assert_consumed()
    np.testing.assert_allclose(got, want, rtol=1e-6)
    for a, b in zip(model.variables + tuple(opt.variables()), model2.variables + tuple(opt2.variables())):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6)


def test_keys_are_tfs(tmp_path):
    """Keys are TF's for the same program (checked with TF 2.21: tf.Module + legacy Adam):
    attributes in assignment order, breadth-first shortest paths, slots under .OPTIMIZER_SLOT.
    (The new optimizers' keys: ``tests/parity/test_checkpoint.py``.)"""
    model, opt = Net(), tf.optimizers.legacy.Adam(0.01)
    model.alias = model.layers[0]   # a shorter path to the same layer: TF names it model/alias
    _train(model, opt, 1)
    path = tf.train.Checkpoint(model=model, optimizer=opt).write(str(tmp_path / "w"))
    keys = {k for k, _ in tf.train.list_variables(path)}
    assert keys == {
        "_CHECKPOINTABLE_OBJECT_GRAPH",
        "model/alias/w/.ATTRIBUTES/VARIABLE_VALUE", "model/alias/b/.ATTRIBUTES/VARIABLE_VALUE",
        "model/layers/1/w/.ATTRIBUTES/VARIABLE_VALUE", "model/layers/1/b/.ATTRIBUTES/VARIABLE_VALUE",
        "optimizer/iter/.ATTRIBUTES/VARIABLE_VALUE", "optimizer/learning_rate/.ATTRIBUTES/VARIABLE_VALUE",
        "optimizer/beta_1/.ATTRIBUTES/VARIABLE_VALUE", "optimizer/beta_2/.ATTRIBUTES/VARIABLE_VALUE",
        "optimizer/decay/.ATTRIBUTES/VARIABLE_VALUE",
        *(f"model/{p}/.OPTIMIZER_SLOT/optimizer/{s}/.ATTRIBUTES/VARIABLE_VALUE"
          for p in ("alias/w", "alias/b", "layers/1/w", "layers/1/b") for s in ("m", "v")),
    }
    np.testing.assert_array_equal(tf.train.load_variable(path, "model/alias/w/.ATTRIBUTES/VARIABLE_VALUE"),
                                  model.layers[0].w.numpy())


def test_containers_namedtuples_and_escaping(tmp_path):
    """TF's names: list indices, namedtuple fields, dict keys with '.' and '/' escaped (.. and .S)."""
    P = collections.namedtuple("P", "a b")
    m = tf.Module()
    m.layers = [tf.Variable(1.0)]
    m.p = P(tf.Variable(3.0), tf.Variable(4.0))
    m.d = {"x/y": tf.Variable(5.0), "a.b": tf.Variable(6.0)}
    m.nt = (tf.Variable(2.0), 3)
    path = tf.train.Checkpoint(t=m).write(str(tmp_path / "nt"))
    keys = {k for k, _ in tf.train.list_variables(path)} - {"_CHECKPOINTABLE_OBJECT_GRAPH"}
    assert keys == {"t/d/a..b/.ATTRIBUTES/VARIABLE_VALUE", "t/d/x.Sy/.ATTRIBUTES/VARIABLE_VALUE",
                    "t/layers/0/.ATTRIBUTES/VARIABLE_VALUE", "t/nt/0/.ATTRIBUTES/VARIABLE_VALUE",
                    "t/p/a/.ATTRIBUTES/VARIABLE_VALUE", "t/p/b/.ATTRIBUTES/VARIABLE_VALUE"}
    m2 = tf.Module()
    m2.layers = [tf.Variable(0.0)]
    m2.p = P(tf.Variable(0.0), tf.Variable(0.0))
    m2.d = {"x/y": tf.Variable(0.0), "a.b": tf.Variable(0.0)}
    m2.nt = (tf.Variable(0.0), 3)
    tf.train.Checkpoint(t=m2).read(path).assert_consumed()
    assert [float(v.numpy()) for v in (m2.layers[0], m2.nt[0], m2.p.a, m2.p.b, m2.d["x/y"], m2.d["a.b"])] == \
        [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]


def test_save_numbering_latest_checkpoint_and_state_file(tmp_path):
    v = tf.Variable([1.0, 2.0])
    ck = tf.train.Checkpoint(v=v)
    assert tf.train.latest_checkpoint(str(tmp_path)) is None
    p1 = ck.save(str(tmp_path / "ckpt"))
    v.assign([3.0, 4.0])
    p2 = ck.save(str(tmp_path / "ckpt"))
    assert (p1, p2) == (str(tmp_path / "ckpt-1"), str(tmp_path / "ckpt-2"))
    assert tf.train.latest_checkpoint(str(tmp_path)) == p2
    assert int(ck.save_counter.numpy()) == 2
    # TF's text state file, paths relative to the directory; Checkpoint.save records only the latest
    assert (tmp_path / "checkpoint").read_text() == 'model_checkpoint_path: "ckpt-2"\n' \
                                                    'all_model_checkpoint_paths: "ckpt-2"\n'
    st = tf.train.get_checkpoint_state(str(tmp_path))
    assert st.model_checkpoint_path == p2 and st.all_model_checkpoint_paths == [p2]
    ck.restore(p1)
    np.testing.assert_array_equal(v.numpy(), [1.0, 2.0])
    assert int(ck.save_counter.numpy()) == 1   # restored too: the next save is ckpt-2 again
    ck.restore(tf.train.latest_checkpoint(str(tmp_path)))
    np.testing.assert_array_equal(v.numpy(), [3.0, 4.0])


def test_write_and_read_do_not_number_or_record(tmp_path):
    """write(): no numbering, no state file, no save_counter created (TF); read() restores."""
    v = tf.Variable(5.0)
    ck = tf.train.Checkpoint(v=v)
    assert ck.write(str(tmp_path / "w")) == str(tmp_path / "w")
    assert ck.write(str(tmp_path / "w")) == str(tmp_path / "w")   # writing twice replaces it
    assert not (tmp_path / "checkpoint").exists() and ck._save_counter is None
    assert [k for k, _ in tf.train.list_variables(str(tmp_path / "w"))] == \
        ["_CHECKPOINTABLE_OBJECT_GRAPH", "v/.ATTRIBUTES/VARIABLE_VALUE"]
    v2 = tf.Variable(0.0)
    tf.train.Checkpoint(v=v2).read(str(tmp_path / "w")).assert_consumed()
    assert float(v2.numpy()) == 5.0


def test_root_and_late_attributes(tmp_path):
    """Checkpoint(root=obj): obj is the root, keyword objects hang from it (TF's keys); attributes
    set later join the graph, and a restore waiting for them applies when they are set."""
    m = tf.Module()
    m.w = tf.Variable(1.0)
    ck = tf.train.Checkpoint(root=m, extra=tf.Variable(2.0))
    path = ck.save(str(tmp_path / "c"))
    assert [k for k, _ in tf.train.list_variables(path)] == [
        "_CHECKPOINTABLE_OBJECT_GRAPH", "extra/.ATTRIBUTES/VARIABLE_VALUE", "save_counter/.ATTRIBUTES/VARIABLE_VALUE",
        "w/.ATTRIBUTES/VARIABLE_VALUE"]
    m2 = tf.Module()
    status = tf.train.Checkpoint(root=m2).restore(path)
    m2.w = tf.Variable(0.0)            # an attribute of the root: restored when set
    assert float(m2.w.numpy()) == 1.0
    with pytest.raises(AssertionError, match="extra"):
        status.assert_consumed()
    late = tf.train.Checkpoint()
    late.x = 3                         # not trackable: a plain attribute, not saved (TF)
    late.v = tf.Variable(5.0)
    assert late.x == 3
    p = late.write(str(tmp_path / "late"))
    assert [k for k, _ in tf.train.list_variables(p)] == ["_CHECKPOINTABLE_OBJECT_GRAPH",
                                                          "v/.ATTRIBUTES/VARIABLE_VALUE"]


def test_hyperparameters_set_during_training_are_restored(tmp_path):
    """A legacy optimizer's beta_1 lives in a Variable (as in TF): a value set during training is
    saved, and the restored optimizer continues with it.  (tf_keras' new optimizers keep it as a
    Python float, not saved: ``test_new_optimizer_hyperparameters_are_not_saved``.)"""
    model, opt = Net(), tf.optimizers.legacy.Adam(0.01)
    _train(model, opt, 2)
    opt.beta_1 = 0.5
    path = tf.train.Checkpoint(model=model, optimizer=opt).save(str(tmp_path / "ckpt"))
    want = _train(model, opt, 2)
    model2, opt2 = Net(), tf.optimizers.legacy.Adam(0.01)
    tf.train.Checkpoint(model=model2, optimizer=opt2).restore(path).assert_consumed()
    assert float(opt2.beta_1.numpy()) == 0.5
    np.testing.assert_allclose(_train(model2, opt2, 2), want, rtol=1e-6)


def test_lists_dicts_and_mixed_containers(tmp_path):
    """Lists and dicts of Variables are saved by index and key; containers with other values are
    accepted as in TF (the other values are not saved)."""
    vs = [tf.Variable(1.0), tf.Variable([2.0, 3.0]), "not saved"]
    d = {"x": tf.Variable(4.0), "n": 7}
    p = tf.train.Checkpoint(vs=vs, d=d).write(str(tmp_path / "c"))
    assert {k for k, _ in tf.train.list_variables(p)} == {
        "_CHECKPOINTABLE_OBJECT_GRAPH", "vs/0/.ATTRIBUTES/VARIABLE_VALUE", "vs/1/.ATTRIBUTES/VARIABLE_VALUE",
        "d/x/.ATTRIBUTES/VARIABLE_VALUE"}
    vs2 = [tf.Variable(0.0), tf.Variable([0.0, 0.0])]
    d2 = {"x": tf.Variable(0.0)}
    tf.train.Checkpoint(vs=vs2, d=d2).read(p).assert_consumed()
    assert (vs2[0].numpy(), vs2[1].numpy().tolist(), d2["x"].numpy()) == (1.0, [2.0, 3.0], 4.0)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "int32", "bool"])
def test_dtypes_round_trip_bit_for_bit(tmp_path, dtype):
    np_dtype = tf.as_dtype(dtype)._np
    v = tf.Variable(np.array([1.5, -2.0, 0.0]).astype(np_dtype))
    saved = v.numpy().copy()
    ck = tf.train.Checkpoint(v=v)
    p = ck.write(str(tmp_path / "b"))
    v.assign(np.ones(3).astype(np_dtype))
    ck.read(p)
    assert v.dtype == tf.as_dtype(dtype) and v.numpy().tobytes() == saved.tobytes()


def test_options_and_write_callbacks(tmp_path):
    seen = []
    opts = tf.train.CheckpointOptions(experimental_write_callbacks=[lambda p: seen.append(p),
                                                                     lambda: seen.append("no-arg")])
    ck = tf.train.Checkpoint(v=tf.Variable(1.0))
    p = ck.save(str(tmp_path / "c"), options=opts)
    assert seen == [p, "no-arg"]
    with pytest.raises(TypeError, match="options"):
        ck.save(str(tmp_path / "c"), options={"enable_async": True})
    with pytest.raises(TypeError, match="callables"):
        tf.train.CheckpointOptions(experimental_write_callbacks=[3])
    assert int(ck.save_counter.numpy()) == 1   # the bad call changed nothing


def test_errors_change_nothing(tmp_path):
    """TF's classes: a non-trackable object ValueError; a missing checkpoint NotFoundError (with
    TF's hint); a directory that is no checkpoint DataLossError; a shape ValueError and a dtype
    InvalidArgumentError, raised before any value is assigned; a bad path type TypeError."""
    with pytest.raises(ValueError, match="expecting v to be a trackable object"):
        tf.train.Checkpoint(v=3)
    with pytest.raises(ValueError, match="root"):
        tf.train.Checkpoint(root=None, v=tf.Variable(1.0)) and tf.train.Checkpoint(root=2.5)
    a, b = tf.Variable([1.0, 2.0], name="a"), tf.Variable(5.0, name="b")
    path = tf.train.Checkpoint(a=a, b=b).save(str(tmp_path / "ckpt"))
    with pytest.raises(tf.errors.NotFoundError, match="checkpoint suffix"):
        tf.train.Checkpoint(a=a).restore(str(tmp_path / "ckpt"))
    with pytest.raises(tf.errors.DataLossError, match="not a checkpoint"):
        tf.train.Checkpoint(a=a).restore(str(tmp_path))
    (tmp_path / "junk").write_text("x")
    with pytest.raises(tf.errors.DataLossError):
        tf.train.Checkpoint(a=a).restore(str(tmp_path / "junk"))
    a2, b2 = tf.Variable([0.0, 0.0, 0.0], name="a"), tf.Variable(0.0, name="b")
    with pytest.raises(ValueError, match=r"incompatible tensor with shape \(2,\) .* variable with shape \(3,\) "
                                         r"and name a:0"):
        tf.train.Checkpoint(a=a2, b=b2).restore(path)
    assert b2.numpy() == 0.0     # checked first: nothing assigned
    i = tf.Variable([1, 2], name="a")
    with pytest.raises(tf.errors.InvalidArgumentError, match="expected dtype int32 does not equal original "
                                                              "dtype float32"):
        tf.train.Checkpoint(a=i).restore(path)
    assert i.numpy().tolist() == [1, 2]
    with pytest.raises(TypeError, match="save_path"):
        tf.train.Checkpoint(a=a).restore(3)
    with pytest.raises(TypeError, match="file_prefix"):
        tf.train.Checkpoint(a=a).write(None)


def test_restore_none_is_initialization_only():
    status = tf.train.Checkpoint(v=tf.Variable(1.0)).restore(None)
    assert isinstance(status, tf.train.InitializationOnlyStatus)
    for check in (status.assert_consumed, status.assert_existing_objects_matched, status.assert_nontrivial_match):
        with pytest.raises(AssertionError, match="No checkpoint specified"):
            check()


def test_saves_a_pending_update_and_values_in_tapejax_function(tmp_path):
    """A Variable whose eager update is still pending (deferred execution) is saved with the
    update applied; so is one updated by a compiled step."""
    w = tf.Variable([1.0, 2.0])
    with tf.GradientTape() as t:
        loss = tf.reduce_sum(w * w)
    w.assign_sub(0.5 * t.gradient(loss, w))   # pending until read
    p = tf.train.Checkpoint(w=w).write(str(tmp_path / "p"))
    np.testing.assert_array_equal(tf.train.load_variable(p, "w/.ATTRIBUTES/VARIABLE_VALUE"), [0.0, 0.0])


def test_no_pickle_in_the_files(tmp_path):
    """The format is orbax's (zarr arrays on TensorStore + JSON): no pickled object anywhere."""
    model, opt = Net(), tf.optimizers.Adam(0.01)
    _train(model, opt, 1)
    p = tf.train.Checkpoint(model=model, optimizer=opt).save(str(tmp_path / "c"))
    for root, _, files in os.walk(p):
        for f in files:
            head = open(os.path.join(root, f), "rb").read(2)
            assert head[:1] != b"\x80", f"{f} looks like a pickle"


def test_a_jax_pytree_of_variables_is_not_trackable_and_the_error_says_what_to_pass(tmp_path):
    """TF's ValueError for an object that is not trackable; for a JAX pytree of Variables (a flax or
    equinox model) it gives the dict recipe, which then saves and restores; an object whose repr
    raises (a flax nnx State of Variables) still gets the ValueError (it was that repr's error)."""
    import dataclasses

    import jax

    @jax.tree_util.register_dataclass
    @dataclasses.dataclass
    class Lin:
        w: object
        act: object = dataclasses.field(metadata={"static": True}, default=None)

    class BadRepr:
        def __repr__(self):
            raise AttributeError("no repr")
    m = Lin(tf.Variable([1.0, 2.0]))
    with pytest.raises(ValueError, match="expecting model to be a trackable.*keystr"):
        tf.train.Checkpoint(model=m)
    with pytest.raises(ValueError, match="expecting root.*<BadRepr object>"):
        tf.train.Checkpoint(BadRepr())
    named = {jax.tree_util.keystr(p): v for p, v in jax.tree_util.tree_leaves_with_path(
        m, is_leaf=lambda x: isinstance(x, tf.Variable)) if isinstance(v, tf.Variable)}
    path = tf.train.Checkpoint(model=named).save(str(tmp_path / "ck"))
    m.w.assign([0.0, 0.0])
    tf.train.Checkpoint(model=named).restore(path).assert_consumed()
    np.testing.assert_allclose(m.w.numpy(), [1.0, 2.0])


def test_a_legacy_layout_restores_into_a_new_optimizer(tmp_path):
    """A checkpoint in the legacy layout (``iter``, hyperparameter Variables, ``.OPTIMIZER_SLOT``
    slots: what tapejax wrote for ``tf.keras.optimizers.Adam`` before it took tf_keras' new
    layout) restores fully into a new optimizer, found by the legacy names."""
    model, opt = Net(), tf.optimizers.legacy.Adam(0.01)
    _train(model, opt, 3)
    path = tf.train.Checkpoint(model=model, optimizer=opt).save(str(tmp_path / "ckpt"))
    assert "optimizer/iter/.ATTRIBUTES/VARIABLE_VALUE" in dict(tf.train.list_variables(path))
    want = _train(model, opt, 3)
    model2, opt2 = Net(), tf.optimizers.Adam(0.01)
    status = tf.train.Checkpoint(model=model2, optimizer=opt2).restore(path)
    status.assert_consumed()
    np.testing.assert_allclose(_train(model2, opt2, 3), want, rtol=1e-6)


def test_new_optimizer_keys_and_hyperparameters(tmp_path):
    """tf_keras' new layout: ``_iterations``, ``_learning_rate``, the state in ``_variables`` (its
    keys) and in lists by kind; ``beta_1`` is not saved (a Python float in tf_keras)."""
    model, opt = Net(), tf.optimizers.Adam(0.01, beta_1=0.5)
    _train(model, opt, 1)
    keys = dict(tf.train.list_variables(tf.train.Checkpoint(optimizer=opt).write(str(tmp_path / "c"))))
    assert {k for k in keys if k.startswith("optimizer/_variables/")} == {
        f"optimizer/_variables/{i}/.ATTRIBUTES/VARIABLE_VALUE" for i in range(1, 9)}
    assert "optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE" in keys
    assert "optimizer/_learning_rate/.ATTRIBUTES/VARIABLE_VALUE" in keys
    assert not any("beta_1" in k for k in keys)


def _graph(spec):
    return _g.SavedGraph([_g.SavedNode([_g.ChildRef(n, c) for n, c in children],
                                       [_g.Attribute("VARIABLE_VALUE", "v", f"k{i}")] if value else [])
                          for i, (children, value) in enumerate(spec)])


def test_slots_from_lists_keras3_layout_becomes_slots():
    """A Keras 3 optimizer node (``_trainable_variables`` parallel to its lists): each list entry
    becomes a SlotEntry of the Variable at the same index; the lists and indexes leave the node."""
    g = _graph([
        ([("w", 1), ("opt", 2)], False),                     # 0 root
        ([], True),                                           # 1 w
        ([("_variables", 3), ("_trainable_variables", 4), ("_iterations", 5), ("_momentums", 6)], False),
        ([("0", 5), ("1", 7)], False),                        # 3 _variables
        ([("0", 1)], False),                                  # 4 _trainable_variables
        ([], True),                                           # 5 iterations
        ([("0", 7)], False),                                  # 6 _momentums
        ([], True),                                           # 7 m of w
    ])
    out = _g.slots_from_lists(g)
    assert [c.name for c in out.nodes[2].children] == ["_iterations"]
    assert out.nodes[2].slots == [_g.SlotEntry(1, "_momentums", 7)]
    assert out.nodes[0] == g.nodes[0] and g.nodes[2].slots == []   # (the input is left alone)


def test_slots_from_lists_tf_keras_layout_keeps_its_lists():
    """tf_keras' layout (no ``_trainable_variables``): the lists stay children, matched by position;
    ``_variables`` and ``_index_dict`` go."""
    g = _graph([
        ([("opt", 1)], False),
        ([("_variables", 2), ("_iterations", 3), ("_index_dict", 5), ("_momentums", 6)], False),
        ([("0", 3), ("1", 4)], False),
        ([], True),
        ([], True),
        ([], False),
        ([("0", 4)], False),
    ])
    out = _g.slots_from_lists(g)
    assert [c.name for c in out.nodes[1].children] == ["_iterations", "_momentums"] and out.nodes[1].slots == []


def test_write_format_is_checked_before_anything_is_written(tmp_path):
    """``format`` other than 'tapejax' or 'tf': ValueError naming the argument; nothing written,
    ``save_counter`` unchanged."""
    ckpt = tf.train.Checkpoint(v=tf.Variable(1.0))
    for call in (lambda: ckpt.write(str(tmp_path / "a"), format="TF"),
                 lambda: ckpt.save(str(tmp_path / "b"), format=None)):
        with pytest.raises(ValueError, match="`format` must be 'tapejax'"):
            call()
    assert int(ckpt.save_counter.numpy()) == 0 and not list(tmp_path.iterdir())
