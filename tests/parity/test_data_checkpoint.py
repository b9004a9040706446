"""Iterator checkpoints against real tf.data: ``tf.train.Checkpoint(iterator=it)`` saved after
``k`` elements, iterated further, restored: the elements after the restore are the ones that
came after the save, in the same iterator and in a fresh iterator of the same dataset, and
``tf.train.CheckpointManager`` keeps and restores them the same way.

Where TF's order is deterministic (no shuffle) the element sequences themselves are compared;
with a shuffle (grain's order, not TF's) the cases compare what must hold on both sides: the
resumed sequence equals the one that followed the save, and the epoch's multiset."""
import os
import tempfile

import numpy as np

from .harness import parity, raises

X = np.arange(40, dtype=np.float32).reshape(20, 2)
Y = np.arange(20, dtype=np.int32)


def py(el):
    """An element as plain Python data (lists of numbers) in its structure."""
    if isinstance(el, dict):
        return {k: py(v) for k, v in el.items()}
    if isinstance(el, tuple):
        return tuple(py(v) for v in el)
    return np.asarray(el).tolist()


def take(it, n):
    out = []
    for _ in range(n):
        try:
            out.append(py(next(it)))
        except StopIteration:
            break
    return out


def resume(tf, make, k, n=1000):
    """``k`` elements, save, the next ``n`` (to the end), restore (same iterator, then a fresh
    one): (the elements before, after the save, after each restore equal to those)."""
    path = os.path.join(tempfile.mkdtemp(), "ckpt")
    it = iter(make())
    before = take(it, k)
    ckpt = tf.train.Checkpoint(step=tf.Variable(k), iterator=it)
    saved = ckpt.save(path)
    after = take(it, n)
    ckpt.step.assign(0)
    ckpt.restore(saved)
    again = take(it, n)
    it2 = iter(make())
    ckpt2 = tf.train.Checkpoint(step=tf.Variable(0), iterator=it2)
    ckpt2.restore(saved)
    fresh = take(it2, n)
    return before, after, again == after, fresh == after, int(ckpt.step.numpy()), int(ckpt2.step.numpy())


def resume_shuffled(tf, make, k, n=1000, rows=lambda e: [e]):
    """``resume`` for a shuffled pipeline: the sequences' agreement, counts and multisets (of
    ``rows(element)``: a batch's rows)."""
    before, after, same, fresh, s1, s2 = resume(tf, make, k, n)
    flat = sorted(str(r) for e in before + after for r in rows(e))
    return len(before), len(after), same, fresh, s1, s2, flat


# ---------------------------------------------------------------------------
# deterministic pipelines: the element sequences
# ---------------------------------------------------------------------------

@parity
def test_slices_map_batch(tf):
    make = lambda: tf.data.Dataset.from_tensor_slices((X, Y)).map(lambda x, y: (x * 2.0, y + 1)).batch(3)
    return resume(tf, make, 2)


@parity
def test_repeat_take_skip(tf):
    make = lambda: tf.data.Dataset.from_tensor_slices(Y).skip(3).take(10).repeat(3)
    return resume(tf, make, 14)


@parity
def test_filter_prefetch(tf):
    make = lambda: (tf.data.Dataset.from_tensor_slices(Y).filter(lambda y: y % 3 != 0)
                    .map(lambda y: y * 10).prefetch(2))
    return resume(tf, make, 5)


@parity
def test_zip_concatenate_enumerate(tf):
    a = tf.data.Dataset.from_tensor_slices(Y)
    b = tf.data.Dataset.from_tensor_slices(X)
    make = lambda: tf.data.Dataset.zip((a, b)).concatenate(tf.data.Dataset.zip((a.take(3), b.take(3)))).batch(4)
    make2 = lambda: tf.data.Dataset.from_tensor_slices(X).enumerate(start=5).prefetch(tf.data.AUTOTUNE)
    first = resume(tf, make, 4)
    second = resume(tf, make2, 7)
    return first, second[1:4]   # (enumerate's index is int64: compared as Python ints)


@parity
def test_cache_and_unbatch(tf):
    make = lambda: tf.data.Dataset.from_tensor_slices(X).batch(3).cache().unbatch().repeat(2)
    return resume(tf, make, 25)


@parity
def test_save_at_start_and_at_end(tf):
    make = lambda: tf.data.Dataset.from_tensor_slices(Y).batch(5)
    return resume(tf, make, 0), resume(tf, make, 4), resume(tf, make, 9)


@parity
def test_checkpoint_manager(tf):
    d = tempfile.mkdtemp()
    it = iter(tf.data.Dataset.from_tensor_slices(Y).map(lambda y: y * 3).batch(2))
    step = tf.Variable(0)
    ckpt = tf.train.Checkpoint(step=step, iterator=it)
    mgr = tf.train.CheckpointManager(ckpt, d, max_to_keep=2)
    seen = []
    for i in range(6):
        seen.append(py(next(it)))
        step.assign_add(1)
        if i % 2 == 1:
            mgr.save()
    after = take(it, 2)
    ckpt.restore(mgr.latest_checkpoint)
    again = take(it, 2)
    ckpt.restore(mgr.checkpoints[0])          # an older one: back to element 4
    older = take(it, 1)
    return seen, after, again, older, int(step.numpy()), len(mgr.checkpoints)


# ---------------------------------------------------------------------------
# shuffled pipelines: the resumed order is the saved one
# ---------------------------------------------------------------------------

@parity
def test_shuffle_seeded_reshuffle_map_batch(tf):
    make = lambda: (tf.data.Dataset.from_tensor_slices(Y).shuffle(8, seed=7).map(lambda y: y + 100)
                    .repeat(3))
    return resume_shuffled(tf, make, 27)


@parity
def test_shuffle_without_reshuffle_batch_prefetch(tf):
    make = lambda: (tf.data.Dataset.from_tensor_slices((X, Y)).shuffle(20, seed=1, reshuffle_each_iteration=False)
                    .repeat(2).batch(6).prefetch(2))
    return resume_shuffled(tf, make, 3, rows=lambda e: e[1])


@parity
def test_shuffle_after_filter_repeat(tf):
    make = lambda: (tf.data.Dataset.from_tensor_slices(Y).filter(lambda y: y % 2 == 0).shuffle(4, seed=3)
                    .repeat(2))
    return resume_shuffled(tf, make, 13)


@parity
def test_second_iteration_resumes_its_own_order(tf):
    ds = tf.data.Dataset.from_tensor_slices(Y).shuffle(20, seed=5)
    first = take(iter(ds), 20)          # the first iteration's order
    path = os.path.join(tempfile.mkdtemp(), "ckpt")
    it = iter(ds)                        # a second iteration: a new order
    head = take(it, 6)
    ckpt = tf.train.Checkpoint(iterator=it)
    saved = ckpt.save(path)
    tail = take(it, 20)
    ckpt.restore(saved)
    return first != head + tail, sorted(head + tail) == sorted(first), take(it, 20) == tail


# ---------------------------------------------------------------------------
# what cannot be saved
# ---------------------------------------------------------------------------

def _gen():
    yield from range(5)


@parity
def test_from_generator_cannot_be_saved(tf):
    ds = tf.data.Dataset.from_generator(_gen, output_signature=tf.TensorSpec((), tf.int32)).map(lambda v: v + 1)
    it = iter(ds)
    next(it)
    ckpt = tf.train.Checkpoint(iterator=it)
    return raises(ckpt.save, os.path.join(tempfile.mkdtemp(), "ckpt")), py(next(it))


@parity(modes=True)
def test_training_resumes_with_model_and_iterator(tf):
    """A linear model trained from a batched, repeated pipeline: checkpoint (step, weights,
    iterator) after 3 steps, 3 more steps, restore, the same 3 steps again: same losses."""
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((24, 3)).astype(np.float32)
    ys = (xs @ np.array([1.0, -2.0, 0.5], np.float32) + 0.1).astype(np.float32)
    ds = tf.data.Dataset.from_tensor_slices((xs, ys)).batch(5).repeat().map(lambda x, y: (x * 1.0, y))
    w = tf.Variable(np.zeros(3, np.float32))
    b = tf.Variable(0.0)
    step = tf.Variable(0)
    it = iter(ds)

    def train(n):
        losses = []
        for _ in range(n):
            x, y = next(it)
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((tf.linalg.matvec(x, w) + b - y) ** 2)
            gw, gb = tape.gradient(loss, [w, b])
            w.assign_sub(0.1 * gw)
            b.assign_sub(0.1 * gb)
            step.assign_add(1)
            losses.append(float(loss.numpy()))
        return losses

    first = train(3)
    ckpt = tf.train.Checkpoint(step=step, w=w, b=b, iterator=it)
    path = ckpt.save(os.path.join(tempfile.mkdtemp(), "ckpt"))
    after = train(3)
    ckpt.restore(path)
    again = train(3)
    return first, after, again, int(step.numpy()), w.numpy()
