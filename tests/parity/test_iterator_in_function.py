"""A tf.data iterator read inside a compiled step (``tapejax/data/staged.py``): every call reads the
next element (TF's iterator is a resource), never the element of the trace frozen into the
program; the end of the data is TF's OutOfRangeError; ``get_next_as_optional`` gives a flag known
when the step runs.  Each case runs with deferred execution on and off (``modes=True``)."""
import numpy as np

from .data_helpers import softmax_classifier
from .harness import parity, raises

X = np.linspace(-1.0, 1.0, 12 * 4, dtype=np.float32).reshape(12, 4)
Y = (np.arange(12) % 3).astype(np.int32)


def _ints(values):
    return [int(v) for v in values]


@parity(modes=True)
def test_next_of_an_iterator_argument_reads_the_next_element_each_call(tf):
    ds = tf.data.Dataset.from_tensor_slices(np.arange(5, dtype=np.int32))
    it = iter(ds)
    f = tf.function(lambda it: next(it) * 10)
    return _ints([f(it) for _ in range(3)]), f.experimental_get_tracing_count(), int(next(it))


@parity(modes=True)
def test_next_of_a_captured_iterator_reads_the_next_element_each_call(tf):
    it = iter(tf.data.Dataset.from_tensor_slices((X[:4], Y[:4])))

    @tf.function
    def f():
        x, y = next(it)
        return tf.reduce_sum(x) + tf.cast(y, tf.float32)

    return [f() for _ in range(4)]


@parity(modes=True)
def test_get_next_past_the_end_raises_out_of_range(tf):
    it = iter(tf.data.Dataset.from_tensor_slices(np.arange(2, dtype=np.int32)))
    f = tf.function(lambda it: it.get_next())
    return _ints([f(it), f(it)]), raises(f, it), raises(f, it)


@parity(modes=True)
def test_next_past_the_end_raises_out_of_range(tf):
    it = iter(tf.data.Dataset.from_tensor_slices(np.arange(1, dtype=np.int32)))
    f = tf.function(lambda it: next(it))
    return int(f(it)), raises(f, it)


@parity(modes=True)
def test_get_next_as_optional_has_a_run_time_flag(tf):
    it = iter(tf.data.Dataset.from_tensor_slices(np.arange(2, dtype=np.int32)))

    @tf.function
    def f(it):
        opt = it.get_next_as_optional()
        return opt.has_value(), tf.cond(opt.has_value(), opt.get_value, lambda: tf.constant(-1))

    return [f(it) for _ in range(4)]


@parity(modes=True)
def test_get_value_of_an_empty_optional_fails_when_the_step_runs(tf):
    it = iter(tf.data.Dataset.from_tensor_slices(np.arange(1, dtype=np.int32)))
    f = tf.function(lambda it: it.get_next_as_optional().get_value() + 1)
    return int(f(it)), raises(f, it)


@parity(modes=True)
def test_reads_inside_a_loop_body_read_one_element_per_iteration(tf):
    it = iter(tf.data.Dataset.from_tensor_slices(np.arange(10, dtype=np.float32)))

    @tf.function
    def f(n):
        s = tf.constant(0.0)
        for _ in tf.range(n):
            s += next(it)
        return s

    return f(tf.constant(3)), f(tf.constant(2)), next(it)


@parity(modes=True)
def test_unknown_batch_size_takes_the_next_elements_shape(tf):
    """batch() without drop_remainder: a None size in the spec; the full batches are read."""
    it = iter(tf.data.Dataset.from_tensor_slices(np.arange(7, dtype=np.float32)).batch(3))
    f = tf.function(lambda it: tf.reduce_sum(next(it)))
    return f(it), f(it)


@parity(modes=True)
def test_a_short_last_batch_read_from_an_iterator_argument(tf):
    """An iterator argument keys the call by the next element's shapes: the short batch traces again."""
    it = iter(tf.data.Dataset.from_tensor_slices(np.arange(5, dtype=np.float32)).batch(3))
    f = tf.function(lambda it: tf.reduce_sum(next(it)))
    return f(it), f(it), raises(f, it)


@parity(deliberate="a captured iterator's program has static shapes: a short last batch fails the traced step "
                   "(InvalidArgumentError naming drop_remainder=True) where TF's graph takes it; an iterator "
                   "passed as an argument takes it (the case above)",
        tapejax_expected=(3.0, "InvalidArgumentError"))
def test_a_short_last_batch_read_from_a_captured_iterator(tf):
    it = iter(tf.data.Dataset.from_tensor_slices(np.arange(5, dtype=np.float32)).batch(3))
    f = tf.function(lambda: tf.reduce_sum(next(it)))
    first = float(f())
    r = raises(f)
    return first, (r.name if hasattr(r, "name") else float(r.value))


@parity(modes=True)
def test_steps_and_python_reads_share_one_position(tf):
    it = iter(tf.data.Dataset.range(6).map(lambda v: tf.cast(v, tf.int32)))
    f = tf.function(lambda it: next(it))
    return _ints([f(it), next(it), f(it), it.get_next(), f(it)])


@parity(modes=True)
def test_training_loop_pulls_batches_inside_the_compiled_step(tf):
    """A softmax classifier trained for 6 steps, each step's tf.function reading next(it) from a
    shuffled (order-free: one batch is the whole epoch), batched, repeated dataset, and from an
    unshuffled one whose batch order shows; an evaluation between the two phases."""
    w, b, sgd = softmax_classifier(tf, 4, n_classes=3, lr=0.3)

    @tf.function
    def train(it):
        x, y = next(it)
        return sgd(x, y)

    shuffled = iter(tf.data.Dataset.from_tensor_slices((X, Y)).shuffle(12, seed=7).batch(12).repeat())
    ordered = iter(tf.data.Dataset.from_tensor_slices((X, Y)).batch(4, drop_remainder=True).repeat())
    losses = [train(shuffled) for _ in range(3)]
    acc = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(tf.matmul(X, w) + b, axis=1, output_type=tf.int32), Y),
                                 tf.float32))
    losses += [train(ordered) for _ in range(4)]
    return losses, acc, w, b


@parity(modes=True)
def test_a_new_iterator_each_epoch_uses_the_same_trace(tf):
    ds = tf.data.Dataset.from_tensor_slices(np.arange(6, dtype=np.float32)).batch(2, drop_remainder=True)
    f = tf.function(lambda it: tf.reduce_sum(next(it)))
    sums = []
    for _ in range(3):
        it = iter(ds)
        sums += [f(it), f(it)]
    return sums, f.experimental_get_tracing_count()


# ---------------------------------------------------------------------------
# for element in dataset: inside the function (data/staged_for.py)
# ---------------------------------------------------------------------------

@parity(modes=True)
def test_for_over_a_dataset_iterates_it_again_at_each_call(tf):
    ds = tf.data.Dataset.from_tensor_slices(np.arange(5, dtype=np.int32))

    @tf.function
    def total():
        s = tf.constant(0)
        for v in ds:
            s += v * v
        return s

    return total(), total(), total.experimental_get_tracing_count()


@parity(modes=True)
def test_for_over_a_dataset_argument_with_break(tf):
    @tf.function
    def upto(d, limit):
        s = tf.constant(0.0)
        n = tf.constant(0)
        for x, y in d:
            if tf.reduce_sum(x) > limit:
                break
            s += tf.reduce_sum(x * y)
            n += 1
        return s, n

    ds = tf.data.Dataset.from_tensor_slices((X, X)).batch(3, drop_remainder=True)
    return upto(ds, tf.constant(100.0)), upto(ds, tf.constant(0.0)), upto(ds.take(2), tf.constant(100.0))


@parity(modes=True)
def test_for_over_a_shuffled_dataset_sees_every_element_once_per_call(tf):
    ds = tf.data.Dataset.from_tensor_slices(np.arange(8, dtype=np.float32)).shuffle(8, seed=3)

    @tf.function
    def seen():
        ta = tf.TensorArray(tf.float32, size=8)
        i = 0
        for v in ds:
            ta = ta.write(i, v)
            i += 1
        return tf.sort(ta.stack())

    return seen(), seen()


@parity(modes=True)
def test_an_epoch_inside_the_compiled_function(tf):
    """A whole epoch per call: for (x, y) in a batched dataset, a softmax classifier's SGD step."""
    w = tf.Variable(np.zeros((4, 3), np.float32))

    @tf.function
    def epoch(d):
        total = tf.constant(0.0)
        for x, y in d:
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=x @ w))
            w.assign_sub(0.5 * tape.gradient(loss, w))
            total += loss
        return total

    ds = tf.data.Dataset.from_tensor_slices((X, Y)).batch(4, drop_remainder=True)
    return epoch(ds), epoch(ds), w


@parity(deliberate="the loop's program has static shapes: a short last batch fails the step "
                   "(InvalidArgumentError naming drop_remainder=True) where TF's graph takes it",
        tapejax_expected="InvalidArgumentError")
def test_for_over_a_dataset_with_a_short_last_batch(tf):
    ds = tf.data.Dataset.from_tensor_slices(np.arange(7, dtype=np.float32)).batch(3)

    @tf.function
    def total():
        s = tf.constant(0.0)
        for b in ds:
            s += tf.reduce_sum(b)
        return s

    r = raises(total)
    return r.name if hasattr(r, "name") else "returned"


@parity
def test_for_over_a_dataset_without_autograph_is_a_value_error(tf):
    ds = tf.data.Dataset.from_tensor_slices(np.arange(3, dtype=np.int32))

    @tf.function(autograph=False)
    def total():
        s = tf.constant(0)
        for v in ds:
            s += v
        return s

    return raises(total)


@parity(modes=True)
def test_next_of_a_new_iterator_is_the_first_element_at_every_call(tf):
    """``next(iter(dataset))`` in a step: TF makes a new iterator at each call (its first
    element every time), and the step reads the Variable when it runs."""
    ds = tf.data.Dataset.range(10).map(lambda x: tf.cast(x + 2, tf.float32))
    w = tf.Variable(2.0)

    @tf.function
    def first_times_w():
        it = iter(ds)
        return next(it) * w + next(it)

    out = []
    for _ in range(3):
        out.append(float(first_times_w()))
        w.assign_add(1.0)
    return out, first_times_w.experimental_get_tracing_count()


@parity(modes=True)
def test_for_over_an_iterator_made_in_the_step(tf):
    ds = tf.data.Dataset.from_tensor_slices(np.arange(5, dtype=np.int32))

    @tf.function
    def total():
        it = iter(ds)
        first = next(it)
        s = tf.constant(0)
        for v in it:   # the rest of this call's iteration
            s += v
        return first, s

    return [_ints(total()) for _ in range(2)]


@parity(modes=True)
def test_reduce_in_a_step_runs_at_every_call(tf):
    """``Dataset.reduce`` in a step: the whole reduction at each call, ``reduce_func`` reading the
    Variable's value of that call; a structured state."""
    ds = tf.data.Dataset.from_tensor_slices(X[:6])
    w = tf.Variable(np.ones(4, np.float32))

    @tf.function
    def stats():
        return ds.reduce((tf.constant(0.0), tf.constant(0)),
                         lambda s, x: (s[0] + tf.reduce_sum(x * w), s[1] + 1))

    out = []
    for k in range(3):
        total, count = stats()
        out.append((float(total), int(count)))
        w.assign(w * 2.0 + k)
    return out, stats.experimental_get_tracing_count()


@parity(modes=True)
def test_get_single_element_in_a_step(tf):
    one = tf.data.Dataset.from_tensors((X[0], Y[0]))
    empty = tf.data.Dataset.range(0)
    two = tf.data.Dataset.range(2)
    w = tf.Variable(3.0)
    f = tf.function(lambda: tf.reduce_sum(one.get_single_element()[0]) * w)
    out = [float(f())]
    w.assign(4.0)
    out.append(float(f()))
    return (out, raises(tf.function(lambda: empty.get_single_element())),
            raises(tf.function(lambda: two.get_single_element())))


@parity(modes=True, rtol=1e-5, atol=1e-6)
def test_validation_loss_by_reduce_between_eager_training_steps(tf):
    """A user's evaluation function: a compiled ``reduce`` over a validation set, called after
    each eager training step (the Variables it reads change between calls)."""
    w, b, step = softmax_classifier(tf, 4, n_classes=3, lr=0.5)
    train = tf.data.Dataset.from_tensor_slices((X, Y)).batch(4)
    val = tf.data.Dataset.from_tensor_slices((X[::2], Y[::2])).batch(3)

    @tf.function
    def val_loss():
        def add(s, batch):
            x, y = batch
            logits = tf.matmul(x, w) + b
            loss = tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
            return s + loss
        return ds_reduce(val, add) / 6.0

    def ds_reduce(ds, fn):
        return ds.reduce(tf.constant(0.0), fn)

    losses = []
    for x, y in train:
        step(x, y)
        losses.append(float(val_loss()))
    return losses, val_loss.experimental_get_tracing_count()


@parity
def test_list_of_a_dataset_without_autograph_is_a_value_error(tf):
    ds = tf.data.Dataset.range(3)
    return raises(tf.function(lambda: list(ds), autograph=False))


@parity(modes=True)
def test_a_tape_around_a_dataset_loop_in_a_step_gives_none(tf):
    """TF's AutoGraph makes a ``for`` over a dataset (and ``reduce``) a ReduceDataset op, which has
    no gradient: a tape entered before the loop gives None for what flows through it; a tape
    made inside the loop's body differentiates as usual."""
    ds = tf.data.Dataset.from_tensor_slices(np.arange(4, dtype=np.float32))
    w = tf.Variable(2.0)

    @tf.function
    def through_reduce():
        with tf.GradientTape() as t:
            r = ds.reduce(tf.constant(0.0), lambda s, x: s + x * w)
        return r, t.gradient(r, w)

    @tf.function
    def through_for():
        with tf.GradientTape() as t:
            s = tf.constant(0.0)
            for x in ds:
                s += x * w
        return s, t.gradient(s, w)

    @tf.function
    def inside_body():
        g = tf.constant(0.0)
        for x in ds:
            with tf.GradientTape() as t:
                y = x * w * w
            g += t.gradient(y, w)
        return g

    return through_reduce(), through_for(), inside_body()
