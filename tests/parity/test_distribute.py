"""``tf.distribute`` programs under TensorFlow 2.21 and tapejax (``tapejax.distribute``).

TF here has one CPU device, so ``MirroredStrategy()`` has one replica on both sides and every
value must match TF's exactly: the custom-training-loop boilerplate (``strategy.scope()``,
``experimental_distribute_dataset``, ``run``, ``reduce``, ``compute_average_loss``) compiled and
eager, the default strategy, the contexts, ``reduce`` / ``gather`` / ``experimental_local_results``,
dataset distribution, Keras ``compile`` / ``fit`` in a scope, and TF's errors.  Several devices
are checked against one device in ``tests/test_distribute_multidevice.py``.
"""
import numpy as np

from .harness import keras_init, parity, raises

TOL = dict(rtol=1e-4, atol=1e-5)
GLOBAL_BATCH = 8


def _data(n=24, d=5, classes=3, seed=0):
    rs = np.random.RandomState(seed)
    return rs.randn(n, d).astype(np.float32), rs.randint(0, classes, size=n).astype(np.int32)


def _vars(tf):
    rs = np.random.RandomState(1)
    w1 = tf.Variable((rs.randn(5, 7) * 0.4).astype(np.float32), name="w1")
    b1 = tf.Variable(np.zeros(7, np.float32), name="b1")
    w2 = tf.Variable((rs.randn(7, 3) * 0.4).astype(np.float32), name="w2")
    return [w1, b1, w2]


def _loop(tf, compiled, strategy_fn):
    """TF's custom-training-loop tutorial on plain Variables: per-example losses scaled by
    compute_average_loss, a regularization loss by scale_regularization_loss, the step run by
    strategy.run and its losses reduced with SUM."""
    x, y = _data()
    strategy = strategy_fn(tf)
    with strategy.scope():
        params = _vars(tf)
        opt = tf.keras.optimizers.Adam(0.05)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH)
    dist_ds = strategy.experimental_distribute_dataset(ds)

    def train_step(xb, yb):
        w1, b1, w2 = params
        with tf.GradientTape() as tape:
            logits = tf.matmul(tf.nn.relu(tf.matmul(xb, w1) + b1), w2)
            per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=yb, logits=logits)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)
            loss += tf.nn.scale_regularization_loss(0.01 * tf.nn.l2_loss(w1))
        grads = tape.gradient(loss, params)
        opt.apply_gradients(zip(grads, params))
        return loss

    def dist_step(xb, yb):
        per_replica = strategy.run(train_step, args=(xb, yb))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    step = tf.function(dist_step) if compiled else dist_step
    losses = []
    for _ in range(2):
        for xb, yb in dist_ds:
            losses.append(step(xb, yb))
    return losses, [p.numpy() for p in params], int(opt.iterations.numpy())


@parity(modes=True, **TOL)
def test_custom_loop_compiled(tf):
    return _loop(tf, True, lambda tf: tf.distribute.MirroredStrategy())


@parity(modes=True, **TOL)
def test_custom_loop_eager(tf):
    return _loop(tf, False, lambda tf: tf.distribute.MirroredStrategy())


@parity(modes=True, **TOL)
def test_custom_loop_one_device_strategy(tf):
    return _loop(tf, True, lambda tf: tf.distribute.OneDeviceStrategy("/cpu:0"))


@parity(modes=True, **TOL)
def test_custom_loop_default_strategy(tf):
    return _loop(tf, True, lambda tf: tf.distribute.get_strategy())


@parity(modes=True, **TOL)
def test_keras_model_custom_loop_in_scope(tf):
    """The tutorial with a Keras model and loss (reduction 'none') built in the scope."""
    x, y = _data()
    strategy = tf.distribute.MirroredStrategy()
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.Input((5,)), tf.keras.layers.Dense(6, activation="relu"),
                                     tf.keras.layers.Dense(3)])
        keras_init(model)
        loss_obj = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
        opt = tf.keras.optimizers.SGD(0.1, momentum=0.9)
    dist_ds = strategy.experimental_distribute_dataset(
        tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH))

    def train_step(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(loss_obj(yb, model(xb, training=True)),
                                              global_batch_size=GLOBAL_BATCH)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    @tf.function
    def dist_step(xb, yb):
        return strategy.reduce("SUM", strategy.run(train_step, args=(xb, yb)), axis=None)

    losses = [dist_step(xb, yb) for xb, yb in dist_ds]
    return losses, [v.numpy() for v in model.trainable_variables]


@parity(modes=True, **TOL)
def test_keras_compile_fit_in_scope(tf):
    """model.compile / fit / evaluate with the model built and compiled in a strategy's scope."""
    x, y = _data()
    strategy = tf.distribute.MirroredStrategy()
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.Input((5,)), tf.keras.layers.Dense(4, activation="tanh"),
                                     tf.keras.layers.Dense(3)])
        keras_init(model)
        model.compile(optimizer="sgd", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    hist = model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    return [float(v) for v in hist.history["loss"]], float(model.evaluate(x, y, verbose=0)), \
        [v.numpy() for v in model.trainable_variables]


@parity(modes=True, **TOL)
def test_loop_over_distributed_dataset_inside_function(tf):
    """``for x in dist_ds`` inside a tf.function, and a distributed iterator passed to one."""
    x, y = _data(n=16)
    strategy = tf.distribute.MirroredStrategy()
    with strategy.scope():
        w = tf.Variable(np.ones((5, 3), np.float32))
    dist_ds = strategy.experimental_distribute_dataset(
        tf.data.Dataset.from_tensor_slices((x, y)).batch(4, drop_remainder=True))

    def step(xb, yb):
        loss = tf.nn.compute_average_loss(
            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=yb, logits=tf.matmul(xb, w)), global_batch_size=4)
        w.assign_sub(0.1 * tf.reduce_mean(xb) * tf.ones_like(w))
        return loss

    @tf.function
    def epoch():
        total = tf.constant(0.0)
        for xb, yb in dist_ds:
            total += strategy.reduce("SUM", strategy.run(step, args=(xb, yb)), axis=None)
        return total

    @tf.function
    def two_steps(it):
        a = strategy.run(step, args=next(it))
        b = strategy.run(step, args=next(it))
        return strategy.reduce("MEAN", a, axis=None) + strategy.reduce("MEAN", b, axis=None)

    it = iter(dist_ds)
    return epoch(), epoch(), two_steps(it), two_steps(it), w.numpy()


@parity
def test_default_strategy_and_contexts(tf):
    d = tf.distribute.get_strategy()
    rc = tf.distribute.get_replica_context()
    out = [tf.distribute.has_strategy(), tf.distribute.in_cross_replica_context(), rc is not None,
           rc.replica_id_in_sync_group, rc.num_replicas_in_sync, rc.strategy is d, d.num_replicas_in_sync]
    with d.scope():
        out.append([tf.distribute.has_strategy(), tf.distribute.in_cross_replica_context(),
                    tf.distribute.get_replica_context() is not None])

    def fn(a, b=1.0):
        ctx = tf.distribute.get_replica_context()
        return a * b, ctx.replica_id_in_sync_group, tf.distribute.in_cross_replica_context(), ctx.num_replicas_in_sync

    out.append(d.run(fn, args=(tf.constant([1.0, 2.0]),), kwargs={"b": 3.0}))
    out.append(rc.merge_call(lambda strategy, a: (strategy is d, tf.distribute.in_cross_replica_context(),
                                                  tf.distribute.has_strategy(), a), args=(2.0,)))
    s = tf.distribute.MirroredStrategy()
    out.append(raises(lambda: s.run(lambda: rc.merge_call(lambda strategy: 1))))
    ds = tf.data.Dataset.range(3)
    out.append(d.experimental_distribute_dataset(ds) is ds)
    out.append(d.distribute_datasets_from_function(
        lambda c: tf.data.Dataset.from_tensors((c.num_replicas_in_sync, c.input_pipeline_id,
                                                c.num_input_pipelines))).element_spec is not None)
    out.append([d.reduce("SUM", 3.0, None), d.reduce("MEAN", tf.constant([1.0, 5.0]), axis=0), d.reduce("SUM", {"a": tf.constant([1.0, 5.0])}, None),
                d.experimental_local_results(2.0), d.gather(tf.constant([1.0]), axis=0)])
    return out


@parity
def test_mirrored_contexts_and_merge_call(tf):
    s = tf.distribute.MirroredStrategy()
    out = [s.num_replicas_in_sync, len(s.extended.worker_devices)]
    with s.scope():
        out.append([tf.distribute.has_strategy(), tf.distribute.in_cross_replica_context(),
                    tf.distribute.get_replica_context() is None, tf.distribute.get_strategy() is s])
        with s.scope():   # entering it again is allowed
            out.append(tf.distribute.get_strategy() is s)
        v = tf.Variable(2.0)
        out.append(s.extended.variable_created_in_scope(v))

    def fn(x):
        ctx = tf.distribute.get_replica_context()
        merged = ctx.merge_call(lambda strategy, a: (strategy is s, tf.distribute.in_cross_replica_context(), a * 2),
                                args=(x,))
        return (x + 1, ctx.replica_id_in_sync_group, ctx.num_replicas_in_sync, tf.distribute.in_cross_replica_context(),
                ctx.all_reduce("SUM", {"a": x, "b": [x * 2]}), ctx.all_reduce(tf.distribute.ReduceOp.MEAN, x),
                merged)

    out.append(s.run(fn, args=(tf.constant([1.0, 2.0]),)))
    out.append(tf.distribute.get_strategy() is s)
    return out


@parity
def test_all_reduce_gradient(tf):
    s = tf.distribute.MirroredStrategy()
    x = tf.Variable([1.0, 3.0])

    def fn():
        with tf.GradientTape() as tape:
            y = tf.distribute.get_replica_context().all_reduce("SUM", x * x)
            loss = tf.reduce_sum(y)
        return tape.gradient(loss, x)

    return s.run(fn)


@parity
def test_reduce_local_results_gather(tf):
    s = tf.distribute.MirroredStrategy()
    r = s.run(lambda a: a * 2.0, args=(tf.constant([[1.0, 2.0, 3.0], [4.0, 5.0, 7.0]]),))
    return [s.reduce("SUM", r, axis=None), s.reduce("MEAN", r, axis=None), s.reduce("sum", r, axis=0),
            s.reduce(tf.distribute.ReduceOp.MEAN, r, axis=0), s.reduce("MEAN", r, axis=-1),
            s.reduce("MEAN", r, axis=(0, 1)), s.reduce("SUM", (r, r[0]), None), s.reduce("SUM", 3.0, None),
            s.experimental_local_results(r), s.experimental_local_results((r, 1.0)), s.gather(r, axis=0),
            tf.distribute.ReduceOp("SUM") is tf.distribute.ReduceOp.SUM,
            tf.distribute.ReduceOp.from_variable_aggregation(tf.VariableAggregation.MEAN).value]


@parity
def test_reduce_and_context_errors(tf):
    s = tf.distribute.MirroredStrategy()
    other = tf.distribute.OneDeviceStrategy("/cpu:0")
    r = tf.constant([1.0, 2.0])

    def nested_scope():
        with other.scope():
            with s.scope():
                pass

    default = tf.distribute.get_strategy()

    def default_scope_inside():
        with s.scope():
            with default.scope():
                pass

    return [raises(s.reduce, "MAX", r, None), raises(s.reduce, 3, r, None, ok=("TypeError",)),
            raises(s.reduce, "MEAN", r, 2, ok=("InvalidArgumentError",)),
            raises(s.run, lambda: s.reduce("SUM", r, None)),
            raises(s.run, lambda: s.run(lambda: 1)), raises(s.run, lambda: 1, args=5),
            raises(nested_scope), raises(default_scope_inside),
            raises(tf.distribute.ReduceOp.from_variable_aggregation, tf.VariableAggregation.NONE),
            raises(tf.distribute.InputContext(2, 0, 4).get_per_replica_batch_size, 10)]


@parity
def test_distributed_dataset_elements_and_iterators(tf):
    x, y = _data(n=10)
    s = tf.distribute.MirroredStrategy()
    ds = tf.data.Dataset.from_tensor_slices({"x": x, "y": y}).batch(4)
    dd = s.experimental_distribute_dataset(ds)
    out = [[e for e in dd], dd.element_spec == ds.element_spec]
    it = iter(dd)
    out.append([it.element_spec == ds.element_spec, it.get_next(), next(it)])
    opt = it.get_next_as_optional()
    out.append([opt.has_value(), opt.get_value()])
    out.append([it.get_next_as_optional().has_value(), raises(it.get_next)])
    contexts = []

    def dataset_fn(ctx):
        contexts.append((ctx.num_replicas_in_sync, ctx.input_pipeline_id, ctx.num_input_pipelines,
                         ctx.get_per_replica_batch_size(6)))
        return tf.data.Dataset.from_tensor_slices(x).batch(ctx.get_per_replica_batch_size(6))

    out.append([e for e in s.distribute_datasets_from_function(dataset_fn)])
    opts = tf.distribute.InputOptions(experimental_replication_mode=tf.distribute.InputReplicationMode.PER_REPLICA)
    out.append([e for e in s.distribute_datasets_from_function(dataset_fn, opts)])
    out.append(contexts)
    out.append([raises(s.experimental_distribute_dataset, [1, 2], ok=("TypeError",)),
                raises(s.experimental_distribute_dataset, ds, opts),
                raises(s.distribute_datasets_from_function, 3), str(tf.distribute.InputContext()),
                tf.distribute.InputOptions().experimental_fetch_to_device])
    return out


@parity
def test_compute_average_loss_and_scale_regularization_loss(tf):
    losses = tf.constant([1.0, 2.0, 3.0, 4.0])
    s = tf.distribute.MirroredStrategy()
    out = [tf.nn.compute_average_loss(losses), tf.nn.compute_average_loss(losses, global_batch_size=8),
           tf.nn.compute_average_loss(losses, sample_weight=[[1.0], [0.0], [2.0], [1.0]], global_batch_size=8),
           tf.nn.compute_average_loss(losses, sample_weight=0.5),
           tf.nn.compute_average_loss(tf.constant([[1.0, 2.0], [3.0, 4.0]]), sample_weight=[1.0, 3.0]),
           tf.nn.compute_average_loss(losses, global_batch_size=0),
           tf.nn.compute_average_loss(losses, global_batch_size=tf.constant(2, tf.int64)),
           tf.nn.scale_regularization_loss([1.0, 2.0]),
           s.run(lambda: (tf.nn.compute_average_loss(losses), tf.nn.scale_regularization_loss(5.0)))]
    with s.scope():
        out.append([raises(tf.nn.compute_average_loss, losses), raises(tf.nn.scale_regularization_loss, 1.0),
                    tf.nn.compute_average_loss(losses, global_batch_size=2)])
    out.append([raises(tf.nn.compute_average_loss, 1.0), raises(tf.nn.compute_average_loss, losses, None, 2.0),
                raises(tf.nn.compute_average_loss, losses, None, -1, ok=("InvalidArgumentError",)),
                raises(tf.nn.compute_average_loss, losses, None, [4])])
    return out


@parity
def test_strategy_constructor_errors_and_options(tf):
    return [tf.distribute.MirroredStrategy(devices=["/cpu:0"]).extended.worker_devices,
            tf.distribute.MirroredStrategy(cross_device_ops=tf.distribute.HierarchicalCopyAllReduce())
            .num_replicas_in_sync,
            tf.distribute.MirroredStrategy(cross_device_ops=tf.distribute.ReductionToOneDevice()).num_replicas_in_sync,
            tf.distribute.OneDeviceStrategy("cpu:0").extended.parameter_devices,
            raises(tf.distribute.MirroredStrategy, ["/cpu:0", "/cpu:0"], ok=("ValueError",)),
            raises(tf.distribute.MirroredStrategy, "/cpu:0"),
            raises(tf.distribute.OneDeviceStrategy, 3, ok=("TypeError",)),
            raises(tf.distribute.NcclAllReduce, num_packs=-1),
            raises(tf.distribute.HierarchicalCopyAllReduce, num_packs=-1),
            tf.distribute.RunOptions().experimental_enable_dynamic_batch_size,
            tf.distribute.InputReplicationMode.PER_WORKER.value]


@parity(modes=True, **TOL)
def test_run_converts_the_step_inside_a_function(tf):
    """strategy.run converts its function's control flow inside a tf.function (TF's AutoGraph)."""
    s = tf.distribute.MirroredStrategy()

    def step(x):
        if tf.reduce_sum(x) > 0:
            y = x * 2.0
        else:
            y = -x
        return y

    f = tf.function(lambda x: s.run(step, args=(x,)))
    return f(tf.constant([1.0, 2.0])), f(tf.constant([-3.0, 1.0]))


@parity
def test_experimental_set_strategy(tf):
    s = tf.distribute.MirroredStrategy()
    tf.distribute.experimental_set_strategy(s)
    out = [tf.distribute.get_strategy() is s, tf.distribute.in_cross_replica_context()]
    out.append(s.extended.variable_created_in_scope(tf.Variable(1.0)))
    tf.distribute.experimental_set_strategy(None)
    out.append([tf.distribute.has_strategy(), tf.distribute.get_replica_context() is not None])

    def inside_a_scope():
        with s.scope():
            tf.distribute.experimental_set_strategy(s)

    out.append(raises(inside_a_scope))
    out.append(tf.distribute.has_strategy())
    return out
