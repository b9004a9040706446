"""Round 18a's ``tf.distribute`` programs: one script for real TF (4 logical CPU devices) and for
tapejax (4 JAX CPU devices), run by ``test_user_programs18a.py`` in a subprocess per side.

``python3 programs18a.py tf|tapejax`` prints ``RESULT`` and a JSON object: each program's name
and its values (nested lists of floats), or ``{"raised": <exception class>}``.  The device count
is fixed when each framework starts, so this runs in its own process: TF is given its logical
devices before anything else, tapejax gets ``XLA_FLAGS=--xla_force_host_platform_device_count=4``
from the runner.
"""
import json
import os
import sys
import tempfile
import time

import numpy as np

BACKEND = sys.argv[1] if len(sys.argv) > 1 else "tapejax"
if BACKEND == "tf":
    import tensorflow as tf

    _cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(_cpu, [tf.config.LogicalDeviceConfiguration()] * 4)
    import tf_keras

    OPT = tf_keras.optimizers
else:
    import tapejax as tf

    OPT = tf.keras.optimizers

DEVICES = [f"/cpu:{i}" for i in range(4)]
GLOBAL = 16
RS = np.random.RandomState(0)
X = RS.randn(70, 5).astype("float32")        # 4 global batches of 16 and a last one of 6
Y = RS.randint(0, 3, size=70).astype("int32")
XT, YT = X[:32] * 0.5 + 0.1, Y[:32][::-1].copy()
PROGRAMS = {}
_MIRRORED = None


def program(fn):
    PROGRAMS[fn.__name__] = fn
    return fn


def val(x):
    """Nested lists of floats (ints and bools as they are) for JSON."""
    if isinstance(x, dict):
        return {k: val(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [val(v) for v in x]
    if isinstance(x, (bool, int, float, str)) or x is None:
        return x
    if hasattr(x, "numpy"):
        x = x.numpy()
    a = np.asarray(x)
    if a.dtype.kind in "iub":
        return a.tolist()
    return a.astype(np.float64).tolist()


def built(opt, variables):
    """An optimizer made in the scope and built there (its Variables are then made in the scope,
    not in the first step's trace: TF 2.21 with Keras 3 fails that under 4 devices with an
    InvalidArgumentError from its variable-lifting ``cond``)."""
    if BACKEND == "tf":
        opt.build(variables)
    return opt


def mirrored():
    """One strategy for the whole process (TF 2.21 fails collectives of a second MirroredStrategy
    over the same logical devices), reducing through one device as a CPU script does."""
    global _MIRRORED
    if _MIRRORED is None:
        _MIRRORED = tf.distribute.MirroredStrategy(DEVICES, cross_device_ops=tf.distribute.ReductionToOneDevice())
    return _MIRRORED


def init_weights(model, seed):
    r = np.random.RandomState(seed)
    model.set_weights([(r.randn(*v.shape) * 0.4).astype("float32") for v in model.weights])


def mlp(reg=None):
    kw = {"kernel_regularizer": tf.keras.regularizers.l2(reg)} if reg else {}
    return tf.keras.Sequential([tf.keras.Input((5,)), tf.keras.layers.Dense(8, activation="relu", **kw),
                                tf.keras.layers.Dense(3)])


def plain_vars(seed=1):
    r = np.random.RandomState(seed)
    return [tf.Variable((r.randn(5, 7) * 0.4).astype("float32")), tf.Variable(np.zeros(7, "float32")),
            tf.Variable((r.randn(7, 3) * 0.4).astype("float32"))]


def logits_of(params, xb):
    w1, b1, w2 = params
    return tf.matmul(tf.nn.relu(tf.matmul(xb, w1) + b1), w2)


def per_example(params, xb, yb):
    return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=yb, logits=logits_of(params, xb))


def dataset(drop=False, x=X, y=Y):
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL, drop_remainder=drop)


# ---------------------------------------------------------------------------------------------
# The tutorial's loop
# ---------------------------------------------------------------------------------------------

def tutorial(strategy):
    """TF's "Custom training with tf.distribute.Strategy": model, optimizer and checkpoint in the
    scope, a distributed dataset with a last partial batch, compute_average_loss with the global
    batch size plus the scaled regularization loss, metrics updated per replica."""
    with strategy.scope():
        model = mlp(reg=0.01)
        init_weights(model, 2)
        loss_object = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
        test_loss = tf.keras.metrics.Mean(name="test_loss")
        train_accuracy = tf.keras.metrics.SparseCategoricalAccuracy(name="train_accuracy")
        test_accuracy = tf.keras.metrics.SparseCategoricalAccuracy(name="test_accuracy")
        optimizer = built(tf.keras.optimizers.Adam(0.02), model.trainable_variables)
        checkpoint = tf.train.Checkpoint(optimizer=optimizer, model=model)
    train_dist = strategy.experimental_distribute_dataset(dataset())
    test_dist = strategy.experimental_distribute_dataset(dataset(x=XT, y=YT))

    def compute_loss(labels, predictions, model_losses):
        per_example_loss = loss_object(labels, predictions)
        loss = tf.nn.compute_average_loss(per_example_loss, global_batch_size=GLOBAL)
        if model_losses:
            loss += tf.nn.scale_regularization_loss(tf.add_n(model_losses))
        return loss

    def train_step(inputs):
        images, labels = inputs
        with tf.GradientTape() as tape:
            predictions = model(images, training=True)
            loss = compute_loss(labels, predictions, model.losses)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        train_accuracy.update_state(labels, predictions)
        return loss

    def test_step(inputs):
        images, labels = inputs
        predictions = model(images, training=False)
        test_loss.update_state(loss_object(labels, predictions))
        test_accuracy.update_state(labels, predictions)

    @tf.function
    def distributed_train_step(dataset_inputs):
        per_replica_losses = strategy.run(train_step, args=(dataset_inputs,))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)

    @tf.function
    def distributed_test_step(dataset_inputs):
        return strategy.run(test_step, args=(dataset_inputs,))

    out = {"step_losses": [], "epoch": []}
    for _ in range(2):
        total_loss, num_batches = 0.0, 0
        for x in train_dist:
            loss = distributed_train_step(x)
            out["step_losses"].append(float(loss))
            total_loss += loss
            num_batches += 1
        for x in test_dist:
            distributed_test_step(x)
        out["epoch"].append([float(total_loss / num_batches), float(test_loss.result()),
                             float(train_accuracy.result()), float(test_accuracy.result())])
        test_loss.reset_state()
        train_accuracy.reset_state()
        test_accuracy.reset_state()
    path = checkpoint.save(os.path.join(tempfile.mkdtemp(), "ckpt"))
    saved = [v.numpy() for v in model.weights]
    for v in model.weights:
        v.assign(tf.zeros_like(v))
    checkpoint.restore(path)
    out["restored_equal"] = all(np.array_equal(a, v.numpy()) for a, v in zip(saved, model.weights))
    out["weights"] = model.weights
    out["iterations"] = optimizer.iterations
    return out


@program
def tutorial_loop_one_device_and_mirrored():
    one = val(tutorial(tf.distribute.OneDeviceStrategy("/cpu:0")))
    four = val(tutorial(mirrored()))
    return {"one": one, "four": four}


@program
def datasets_from_function_per_replica_batch():
    strategy = mirrored()
    contexts = []

    def dataset_fn(input_context):
        contexts.append([input_context.num_replicas_in_sync, input_context.input_pipeline_id,
                         input_context.num_input_pipelines])
        batch_size = input_context.get_per_replica_batch_size(GLOBAL)
        ds = tf.data.Dataset.from_tensor_slices((X[:64], Y[:64]))
        ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        return ds.batch(batch_size)

    with strategy.scope():
        params = plain_vars()
        opt = OPT.SGD(0.5)
    dist = strategy.distribute_datasets_from_function(dataset_fn)

    def train_step(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(per_example(params, xb, yb), global_batch_size=GLOBAL)
        opt.apply_gradients(zip(tape.gradient(loss, params), params))
        return loss

    @tf.function
    def step(xb, yb):
        return strategy.reduce("SUM", strategy.run(train_step, args=(xb, yb)), axis=None)

    losses = [step(xb, yb) for xb, yb in dist]
    return val({"contexts": contexts, "losses": losses, "vars": params, "iterations": opt.iterations})


@program
def iter_next_in_function_over_tf_range():
    strategy = mirrored()
    with strategy.scope():
        model = mlp()
        init_weights(model, 3)
        opt = built(tf.keras.optimizers.SGD(0.1, momentum=0.9), model.trainable_variables)
        loss_obj = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    dist = strategy.experimental_distribute_dataset(dataset(drop=True).repeat())

    def train_step(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(loss_obj(yb, model(xb, training=True)), global_batch_size=GLOBAL)
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    @tf.function
    def train_steps(iterator, steps):
        total = tf.constant(0.0)
        for _ in tf.range(steps):
            xb, yb = next(iterator)
            total += strategy.reduce("SUM", strategy.run(train_step, args=(xb, yb)), axis=None)
        return total / tf.cast(steps, tf.float32)

    it = iter(dist)
    means = [train_steps(it, tf.constant(steps)) for steps in (3, 5)]
    return val({"means": means, "weights": model.weights, "iterations": opt.iterations})


@program
def partial_last_batch_average_loss_without_global_batch_size():
    """compute_average_loss without global_batch_size: TF divides each replica's sum by its own
    batch size times the replicas; the last global batch of 6 is split unevenly."""
    strategy = mirrored()
    with strategy.scope():
        params = plain_vars(4)
        opt = OPT.SGD(0.3)
    dist = strategy.experimental_distribute_dataset(dataset())

    def train_step(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(per_example(params, xb, yb))
        opt.apply_gradients(zip(tape.gradient(loss, params), params))
        return loss, tf.shape(xb)[0]

    @tf.function
    def step(xb, yb):
        loss, n = strategy.run(train_step, args=(xb, yb))
        return strategy.reduce("SUM", loss, axis=None), strategy.reduce("SUM", n, axis=None)

    out = [step(xb, yb) for xb, yb in dist]
    return val({"steps": out, "vars": params})


# ---------------------------------------------------------------------------------------------
# Gradients across replicas
# ---------------------------------------------------------------------------------------------

def grad_program(kind):
    strategy = mirrored()
    with strategy.scope():
        params = plain_vars(5)
        opt = OPT.SGD(0.2, momentum=0.5)
    dist = strategy.experimental_distribute_dataset(dataset(drop=True))

    def train_step(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(per_example(params, xb, yb), global_batch_size=GLOBAL)
            loss += tf.nn.scale_regularization_loss(0.01 * tf.add_n([tf.nn.l2_loss(params[0]),
                                                                     tf.nn.l2_loss(params[2])]))
        grads = tape.gradient(loss, params)
        ctx = tf.distribute.get_replica_context()
        if kind == "aggregated":
            opt.apply_gradients(zip(grads, params))
        elif kind == "all_reduce":
            grads = ctx.all_reduce(tf.distribute.ReduceOp.SUM, grads)
            opt.apply_gradients(zip(grads, params), experimental_aggregate_gradients=False)
        elif kind == "clip_after":
            grads = ctx.all_reduce("SUM", grads)
            grads, _ = tf.clip_by_global_norm(grads, 0.3)
            opt.apply_gradients(zip(grads, params), experimental_aggregate_gradients=False)
        elif kind == "clip_before":
            grads, _ = tf.clip_by_global_norm(grads, 0.05)
            grads = ctx.all_reduce("SUM", grads)
            opt.apply_gradients(zip(grads, params), experimental_aggregate_gradients=False)
        return loss

    @tf.function
    def step(xb, yb):
        return strategy.reduce("SUM", strategy.run(train_step, args=(xb, yb)), axis=None)

    losses = [step(xb, yb) for _ in range(2) for xb, yb in dist]
    return val({"losses": losses, "vars": params, "iterations": opt.iterations})


@program
def gradients_aggregated_by_apply_gradients():
    return grad_program("aggregated")


@program
def gradients_all_reduced_by_hand():
    return {"by_hand": grad_program("all_reduce"), "aggregated": grad_program("aggregated")}


@program
def clip_by_global_norm_after_all_reduce():
    return grad_program("clip_after")


@program
def clip_by_global_norm_before_all_reduce():
    return grad_program("clip_before")


@program
def gradient_accumulation_in_on_read_sum_variables():
    """Gradients accumulated over 2 micro-steps into ON_READ / SUM Variables made in the scope,
    applied (read in cross-replica context) every second step, then zeroed."""
    strategy = mirrored()
    with strategy.scope():
        params = plain_vars(6)
        opt = OPT.Adam(0.05)
        accum = [tf.Variable(tf.zeros_like(p), trainable=False, synchronization=tf.VariableSynchronization.ON_READ,
                             aggregation=tf.VariableAggregation.SUM) for p in params]
    dist = strategy.experimental_distribute_dataset(dataset(drop=True))

    def accumulate(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(per_example(params, xb, yb), global_batch_size=2 * GLOBAL)
        for a, g in zip(accum, tape.gradient(loss, params)):
            a.assign_add(g)
        return loss

    @tf.function
    def micro(xb, yb):
        return strategy.reduce("SUM", strategy.run(accumulate, args=(xb, yb)), axis=None)

    def apply_fn():
        opt.apply_gradients(zip([a.read_value() for a in accum], params))
        for a in accum:
            a.assign(tf.zeros_like(a))

    @tf.function
    def apply():
        strategy.run(apply_fn)

    losses, sums = [], []
    for i, (xb, yb) in enumerate(dist):
        losses.append(micro(xb, yb))
        if i % 2 == 1:
            sums.append([a.read_value() for a in accum])
            apply()
    return val({"losses": losses, "sums": sums, "vars": params, "iterations": opt.iterations})


def aggregated_variables(sync, aggregation):
    strategy = mirrored()
    with strategy.scope():
        v = tf.Variable([0.0, 0.0], synchronization=sync, aggregation=aggregation, trainable=False)
        count = tf.Variable(0.0, synchronization=sync, aggregation=aggregation, trainable=False)
    dist = strategy.experimental_distribute_dataset(
        tf.data.Dataset.from_tensor_slices(np.arange(32, dtype="float32").reshape(16, 2)).batch(8))

    def step(xb):
        v.assign_add(tf.reduce_sum(xb, axis=0))
        count.assign_add(tf.cast(tf.shape(xb)[0] > 0, tf.float32))

    @tf.function
    def run(xb):
        strategy.run(step, args=(xb,))

    for xb in dist:
        run(xb)
    return val([v.read_value(), count.read_value()])


def _three_aggregations(sync):
    A = tf.VariableAggregation
    return {"sum": aggregated_variables(sync, A.SUM), "mean": aggregated_variables(sync, A.MEAN),
            "first": aggregated_variables(sync, A.ONLY_FIRST_REPLICA)}


@program
def on_read_variables_with_sum_mean_and_first_replica():
    return _three_aggregations(tf.VariableSynchronization.ON_READ)


@program
def on_write_variables_with_sum_mean_and_first_replica():
    return _three_aggregations(tf.VariableSynchronization.ON_WRITE)


@program
def sum_on_read_variable_updated_outside_the_replica_context():
    """An ON_READ / SUM Variable (TF's SyncOnReadVariable) takes assign_add only in strategy.run:
    eagerly, in the scope or in a function outside run it is TF's ValueError; assign works."""
    strategy = mirrored()
    with strategy.scope():
        total = tf.Variable(0.0, synchronization=tf.VariableSynchronization.ON_READ,
                            aggregation=tf.VariableAggregation.SUM, trainable=False)
    dist = strategy.experimental_distribute_dataset(dataset(drop=True))
    out = []

    def attempt(fn):
        try:
            fn()
            out.append(float(total.numpy()))
        except Exception as e:  # noqa: BLE001 - the class is the result
            out.append(type(e).__name__)

    attempt(lambda: total.assign_add(1.0))
    with strategy.scope():
        attempt(lambda: total.assign_sub(1.0))
    attempt(tf.function(lambda: total.assign_add(1.0)))
    attempt(lambda: total.assign(5.0))
    step = tf.function(lambda xb: strategy.run(lambda x: total.assign_add(tf.reduce_sum(x)), args=(xb,)))
    attempt(lambda: [step(xb) for xb, _ in dist])
    return out


@program
def merge_call_reduces_in_cross_replica_context():
    strategy = mirrored()
    with strategy.scope():
        params = plain_vars(7)
        total = tf.Variable(0.0)
    dist = strategy.experimental_distribute_dataset(dataset(drop=True))
    seen = []

    def merge_fn(strat, per_replica_sum):
        seen.append(tf.distribute.in_cross_replica_context())
        reduced = strat.reduce("SUM", per_replica_sum, axis=None)
        total.assign_add(reduced)
        return reduced

    def step(xb, yb):
        s = tf.reduce_sum(per_example(params, xb, yb))
        return tf.distribute.get_replica_context().merge_call(merge_fn, args=(s,))

    @tf.function
    def run(xb, yb):
        return strategy.run(step, args=(xb, yb))

    out = [strategy.reduce("MEAN", run(xb, yb), axis=None) for xb, yb in dist]
    return val({"out": out, "total": total, "cross_replica": seen[:1]})


# ---------------------------------------------------------------------------------------------
# State and outputs
# ---------------------------------------------------------------------------------------------

@program
def gather_and_local_results_of_per_replica_predictions():
    strategy = mirrored()
    with strategy.scope():
        params = plain_vars(8)
    dist = strategy.experimental_distribute_dataset(dataset(drop=True))

    @tf.function
    def predict(xb):
        return strategy.run(lambda x: tf.nn.softmax(logits_of(params, x)), args=(xb,))

    gathered, concatenated, counts = [], [], []
    for xb, _ in dist:
        per_replica = predict(xb)
        gathered.append(strategy.gather(per_replica, axis=0))
        local = strategy.experimental_local_results(per_replica)
        counts.append(len(local))
        concatenated.append(tf.concat(local, axis=0))
    return val({"gathered": gathered, "concatenated": concatenated, "local_counts": counts})


@program
def variables_created_on_the_first_trace_under_the_scope():
    strategy = mirrored()

    class Dense(tf.Module):
        def __init__(self, units):
            super().__init__()
            self.units, self.w = units, None

        def __call__(self, x):
            if self.w is None:
                r = np.random.RandomState(9)
                self.w = tf.Variable((r.randn(int(x.shape[-1]), self.units) * 0.3).astype("float32"))
                self.b = tf.Variable(tf.zeros([self.units]))
            return tf.matmul(x, self.w) + self.b

    with strategy.scope():
        layer = Dense(3)
        opt = OPT.SGD(0.4)
    dist = strategy.experimental_distribute_dataset(dataset(drop=True))

    def train_step(xb, yb):
        with tf.GradientTape() as tape:
            logits = layer(xb)
            loss = tf.nn.compute_average_loss(
                tf.nn.sparse_softmax_cross_entropy_with_logits(labels=yb, logits=logits), global_batch_size=GLOBAL)
        vs = [layer.w, layer.b]
        opt.apply_gradients(zip(tape.gradient(loss, vs), vs))
        return loss

    @tf.function
    def step(xb, yb):
        return strategy.reduce("SUM", strategy.run(train_step, args=(xb, yb)), axis=None)

    with strategy.scope():
        losses = [step(xb, yb) for xb, yb in dist]
    return val({"losses": losses, "vars": [layer.w, layer.b], "n_vars": len(layer.trainable_variables)})


@program
def keras_fit_in_the_strategy_scope():
    strategy = mirrored()
    with strategy.scope():
        model = mlp()
        init_weights(model, 10)
        model.compile(optimizer=tf.keras.optimizers.SGD(0.1),
                      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    hist = model.fit(dataset(drop=True), epochs=2, verbose=0)
    ev = model.evaluate(tf.data.Dataset.from_tensor_slices((XT, YT)).batch(GLOBAL), verbose=0)
    return val({"loss": hist.history["loss"], "acc": hist.history["accuracy"], "eval": ev,
                "weights": model.weights, "iterations": model.optimizer.iterations})


def batch_norm_program(synchronized):
    strategy = mirrored()
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.Input((5,)), tf.keras.layers.Dense(6),
                                     tf.keras.layers.BatchNormalization(momentum=0.5, synchronized=synchronized),
                                     tf.keras.layers.Dense(3)])
        init_weights(model, 11)
        opt = built(tf.keras.optimizers.SGD(0.1), model.trainable_variables)
    dist = strategy.experimental_distribute_dataset(dataset(drop=True, x=X * 2 + 1))
    loss_obj = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    def train_step(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(loss_obj(yb, model(xb, training=True)), global_batch_size=GLOBAL)
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    @tf.function
    def step(xb, yb):
        return strategy.reduce("SUM", strategy.run(train_step, args=(xb, yb)), axis=None)

    losses = [step(xb, yb) for xb, yb in dist]
    bn = model.layers[1]
    return val({"losses": losses, "moving": [bn.moving_mean, bn.moving_variance], "weights": model.weights})


@program
def batch_norm_synchronized_moving_statistics():
    return batch_norm_program(True)


@program
def batch_norm_per_replica_moving_statistics():
    return batch_norm_program(False)


def ckpt_train(strategy, restore_from=None, steps=2):
    with strategy.scope():
        params = plain_vars(12)
        opt = OPT.Adam(0.05)
        ckpt = tf.train.Checkpoint(params=params, optimizer=opt)
    if restore_from:
        ckpt.restore(restore_from)
    dist = strategy.experimental_distribute_dataset(dataset(drop=True))

    def train_step(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(per_example(params, xb, yb), global_batch_size=GLOBAL)
        opt.apply_gradients(zip(tape.gradient(loss, params), params))
        return loss

    @tf.function
    def step(xb, yb):
        return strategy.reduce("SUM", strategy.run(train_step, args=(xb, yb)), axis=None)

    it = iter(dist)
    losses = [step(*next(it)) for _ in range(steps)]
    path = ckpt.save(os.path.join(tempfile.mkdtemp(), "ckpt"))
    return path, {"losses": losses, "vars": params, "iterations": opt.iterations}


@program
def checkpoint_saved_under_four_devices_restored_under_one_and_back():
    one = lambda: tf.distribute.OneDeviceStrategy("/cpu:0")  # noqa: E731
    path4, first4 = ckpt_train(mirrored())
    _, then1 = ckpt_train(one(), restore_from=path4)
    path1, first1 = ckpt_train(one())
    _, then4 = ckpt_train(mirrored(), restore_from=path1)
    return val({"first4": first4, "then1": then1, "first1": first1, "then4": then4})


def main():
    only = sys.argv[2:]
    results = {}
    for name, fn in PROGRAMS.items():
        if only and name not in only:
            continue
        start = time.time()
        try:
            results[name] = fn()
        except Exception as e:  # noqa: BLE001 - the class is the result
            results[name] = {"raised": type(e).__name__, "message": str(e)[:300]}
        print(f"{name}: {time.time() - start:.1f} s", file=sys.stderr)
    print("RESULT" + json.dumps(results))


if __name__ == "__main__":
    main()
