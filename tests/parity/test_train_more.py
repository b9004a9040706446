"""tf.train.ExponentialMovingAverage (tapejax/train/moving_averages.py) under TensorFlow and tapejax:
shadow values over steps, num_updates, a tf.function step, names and errors; and
tf.train.checkpoints_iterator (tapejax/train/state_file.py); tf.DeviceSpec (tapejax/compat/device_spec.py)."""
import re

from .harness import parity, raises


@parity(modes=True)
def test_ema_follows_variables(tf):
    """Shadows start at the Variable's value and move by (1 - decay); num_updates lowers the decay;
    a second apply list adds a Variable; average / average_name; float-only, Variables only."""
    w = tf.Variable([1.0, 2.0], name="w")
    b = tf.Variable(0.5, name="b")
    step = tf.Variable(0.0, trainable=False)
    ema = tf.train.ExponentialMovingAverage(0.9)
    ema2 = tf.train.ExponentialMovingAverage(0.99, num_updates=step, name="fast")
    out = []
    for i in range(3):
        w.assign_add([1.0, -1.0])
        ema.apply([w])
        ema2.apply([w, b])
        b.assign(b * 2.0)
        step.assign_add(1.0)
        out.append((ema.average(w).read_value(), ema2.average(w).read_value(), ema2.average(b).read_value()))
    ema.apply([w, b])
    # (a shadow's name is unique in the process, as TF's: 'w/ExponentialMovingAverage_1' when a run
    # before this one averaged a 'w'; the name without that suffix is what does not depend on it)
    return (out, ema.average(b).read_value(), ema.average(tf.Variable(1.0)), ema.name, ema2.name,
            re.sub(r"_\d+$", "", ema.average_name(w)), re.sub(r"_\d+$", "", ema2.average_name(b)),
            ema.average(w).trainable,
            raises(ema.apply, [tf.Variable(1)]), raises(ema.apply, [tf.constant(1.0)]))


@parity(modes=True)
def test_ema_in_a_function(tf):
    """A training step in tf.function that updates the weights and then the averages."""
    w = tf.Variable([1.0, -1.0])
    ema = tf.train.ExponentialMovingAverage(0.5)
    ema.apply([w])

    @tf.function
    def train_step(x):
        with tf.GradientTape() as t:
            loss = tf.reduce_sum((w * x - 1.0) ** 2)
        w.assign_sub(0.1 * t.gradient(loss, w))
        ema.apply([w])
        return loss

    losses = [train_step(tf.constant([2.0, 3.0])) for _ in range(3)]
    return losses, w.read_value(), ema.average(w).read_value()


@parity(modes=True)
def test_ema_first_applied_inside_a_function_after_an_update(tf):
    """The shadow made by the first ``apply`` inside a compiled step starts from the Variable's
    value before the call (TF creates it in init_scope), not from the step's updated value."""
    w = tf.Variable([1.0, -1.0])
    ema = tf.train.ExponentialMovingAverage(0.5)

    @tf.function
    def train_step():
        w.assign_add([1.0, 2.0])
        ema.apply([w])

    shadows = []
    for _ in range(3):
        train_step()
        shadows.append(ema.average(w).read_value())
    return shadows, w


@parity
def test_checkpoints_iterator(tf):
    """checkpoints_iterator yields the latest checkpoint, then a newer one written while waiting
    (timeout_fn saves it and keeps waiting once), then stops at the timeout."""
    import os
    import tempfile
    d = tempfile.mkdtemp()
    ckpt = tf.train.Checkpoint(v=tf.Variable(1.0))
    ckpt.save(os.path.join(d, "ckpt"))
    ckpt.save(os.path.join(d, "ckpt"))
    calls = []

    def timeout_fn():
        calls.append(1)
        if len(calls) == 1:
            ckpt.save(os.path.join(d, "ckpt"))
            return False
        return True
    seen = [os.path.basename(p) for p in tf.train.checkpoints_iterator(d, timeout=0.2, timeout_fn=timeout_fn)]
    empty = list(tf.train.checkpoints_iterator(tempfile.mkdtemp(), timeout=0.1))
    return seen, len(calls), empty


@parity
def test_device_spec(tf):
    """tf.DeviceSpec: parsing TF's forms, to_string naming only the parts given, merging, replace,
    equality and hashing, and the errors."""
    D = tf.DeviceSpec
    specs = ["/job:foo/replica:0/task:1/device:GPU:3", "/cpu:0", "GPU:1", "/device:CPU:*", "/job:w", "", "/gpu:*",
             "CPU", "/job:a/job:b"]
    parsed = [(d.job, d.replica, d.task, d.device_type, d.device_index, d.to_string())
              for d in (D.from_string(s) for s in specs)]
    built = D(job="a", device_type="gpu", device_index=2)
    return (parsed, built.to_string(), built.device_type,
            D.from_string("/job:x/task:1").make_merged_spec(D.from_string("/device:GPU:0")).to_string(),
            D.from_string("/job:x/task:1").replace(task=3, device_type="CPU").to_string(),
            D.from_string("/job:x") == D(job="x"), hash(D(job="x")) == hash(D.from_string("/job:x")),
            D(job="a").parse_from_string("/GPU:0").to_string(), repr(D(job="a", task=2)),
            raises(D.from_string, "/foo:bar"), raises(D.from_string, "/device:GPU:x"),
            raises(D.from_string, "GPU:0:1"), raises(D, replica="x"),
            raises(D.from_string, "/cpu:0/gpu:1"))
