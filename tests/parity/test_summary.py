"""tf.summary under TensorFlow and tapejax: the event files read back with TensorBoard's reader.

Each case writes summaries into a fresh directory and returns what TensorBoard's
``EventFileLoader`` reads: ``(step, tag, plugin, description, value)`` per summary
value, the value as the stored tensor (PNG images decoded to pixels).  TF writes
with its own summary ops, tapejax with tensorboardX; the files must say the same.
"""
import glob
import io
import tempfile

import numpy as np
import pytest

from .harness import parity

pytest.importorskip("tensorboard", reason="tensorboard (the event reader) is not installed")
pytest.importorskip("tensorboardX", reason="tensorboardX is not installed")


def read_events(logdir):
    from PIL import Image
    from tensorboard.backend.event_processing import event_file_loader
    from tensorboard.util import tensor_util

    out = []
    for path in sorted(glob.glob(logdir + "/*")):
        for ev in event_file_loader.EventFileLoader(path).Load():
            if not ev.HasField("summary"):
                continue
            for val in ev.summary.value:
                arr = tensor_util.make_ndarray(val.tensor)
                if arr.dtype == object:
                    value = [np.asarray(Image.open(io.BytesIO(b))) if b.startswith(b"\x89PNG") else b
                             for b in arr.reshape(-1)]
                    value = (list(arr.shape), value)
                else:
                    value = arr
                out.append((int(ev.step), val.tag, val.metadata.plugin_data.plugin_name,
                            val.metadata.summary_description, value))
    return out


def _writer(tf):
    logdir = tempfile.mkdtemp(prefix="summary_parity")
    return tf.summary.create_file_writer(logdir), logdir


@parity
def test_eager_summaries(tf):
    """scalar / histogram / image / text with explicit and default steps, name scopes, record_if."""
    w, logdir = _writer(tf)
    rng = np.random.RandomState(0)
    imgs = rng.uniform(size=(4, 4, 5, 3)).astype(np.float32)
    results = []
    with w.as_default():
        results.append(tf.summary.scalar("loss", 0.5, step=1))
        tf.summary.scalar("loss", tf.constant(0.25), step=2)
        tf.summary.scalar("ival", 3, step=3, description="an int")
        tf.summary.histogram("h", tf.constant([1., 2., 2., 3., 10.]), step=5)
        tf.summary.histogram("h4", [1., 2.], step=5, buckets=4)
        tf.summary.histogram("same", [2., 2.], step=5, buckets=3)
        tf.summary.histogram("empty", tf.zeros((0,)), step=5, buckets=2)
        tf.summary.histogram("mat", tf.constant(rng.randn(6, 7).astype(np.float32)), step=5)
        tf.summary.image("img", tf.constant(imgs), step=6)
        tf.summary.image("gray", tf.constant(imgs[:, :, :, :1]), step=6, max_outputs=1)
        tf.summary.image("u8", tf.constant((imgs[:2] * 255).astype(np.uint8)), step=6)
        tf.summary.image("rgba", tf.constant(np.concatenate([imgs[:1], imgs[:1, :, :, :1]], -1)), step=6)
        tf.summary.text("t", "hello world", step=7)
        tf.summary.text("t2", ["a", "b"], step=7)
        tf.summary.experimental.set_step(10)
        results.append(tf.summary.experimental.get_step())
        tf.summary.scalar("s", 1.5)
        with tf.name_scope("scope"):
            tf.summary.scalar("s", 2.5)
        with tf.summary.record_if(False):
            results.append(tf.summary.scalar("no", 1.))
        with tf.summary.record_if(lambda: False):
            tf.summary.scalar("no2", 1.)
        results.append(tf.summary.should_record_summaries())
        tf.summary.experimental.set_step(None)
    w.flush()
    results.append(tf.summary.scalar("no writer", 1., step=0))
    return results, read_events(logdir)


@parity(modes=True)
def test_summaries_in_a_compiled_step(tf):
    """Inside tf.function: each call writes its own values at its step (a Variable), in order."""
    w, logdir = _writer(tf)
    step = tf.Variable(0, dtype=tf.int64)
    v = tf.Variable([1., -1.])

    @tf.function
    def train(x):
        with tf.GradientTape() as t:
            loss = tf.reduce_sum(tf.square(v * x))
        g = t.gradient(loss, v)
        v.assign_sub(0.1 * g)
        tf.summary.scalar("loss", loss, step=step)
        tf.summary.histogram("grad", g, step=step, buckets=3)
        step.assign_add(1)
        return loss

    with w.as_default():
        losses = [train(tf.constant([1., 2.])) for _ in range(3)]
    w.flush()
    return losses, read_events(logdir)


@parity
def test_summary_errors(tf):
    """No step, a non-scalar scalar, a rank-3 image, logdir None: TF's ValueErrors."""
    from .test_debugging import err
    w, _ = _writer(tf)
    with w.as_default():
        out = [err(tf.summary.scalar, "a", 1.0), err(tf.summary.scalar, "v", [1., 2.], step=0),
               err(tf.summary.image, "i", tf.zeros((4, 5, 1)), step=0)]
    return out + [err(tf.summary.create_file_writer, None)]


def _canonical_graph(data):
    """A serialized GraphDef with its map fields in key order (TF's writer keeps no fixed order)."""
    from tensorboard.compat.proto import graph_pb2
    return graph_pb2.GraphDef.FromString(data).SerializeToString(deterministic=True)


def _read_graphs(logdir):
    from tensorboard.backend.event_processing import event_file_loader
    return [_canonical_graph(ev.graph_def) for path in sorted(glob.glob(logdir + "/*"))
            for ev in event_file_loader.EventFileLoader(path).Load() if ev.HasField("graph_def")]


@parity
def test_write_audio_graph(tf):
    """tf.summary.write (any dtype, a callable, metadata as a proto or bytes, tag unscoped),
    tf.summary.audio (WAV bytes as TF's encode_wav, clamped and rounded), tf.summary.graph (a
    GraphDef made by TensorFlow; also the migrated __run_graph__ value TensorBoard reads)."""
    import tensorflow as real_tf
    from tensorboard.compat.proto import summary_pb2

    w, logdir = _writer(tf)
    t = np.linspace(0.0, 30.0, 2 * 50 * 2).reshape(2, 50, 2)
    clip = (1.2 * np.sin(t)).astype(np.float32)   # some samples beyond [-1, 1]: clamped
    md = summary_pb2.SummaryMetadata()
    md.plugin_data.plugin_name = "custom"
    md.summary_description = "mine"
    g = real_tf.Graph()
    with g.as_default():
        real_tf.constant(1.0, name="c")
    gd = g.as_graph_def()
    results = []
    with w.as_default(step=3):
        with tf.name_scope("scope"):
            results.append(tf.summary.write("raw", tf.constant([1.0, 2.0])))
            tf.summary.write("ints", lambda: tf.constant([[1, 2], [3, 4]]), step=4, metadata=b"")
            tf.summary.write("md", tf.constant(1.5), metadata=md)
            tf.summary.write("mdbytes", tf.constant(True), metadata=md.SerializeToString())
            results.append(tf.summary.audio("snd", tf.constant(clip), 8000, max_outputs=1, description="d"))
            tf.summary.audio("snd2", tf.constant(clip), tf.constant(16000), step=5)
        results.append(tf.summary.graph(gd))
        with tf.summary.record_if(False):
            results.append(tf.summary.graph(gd))
    results.append(tf.summary.graph(gd))
    results.append(tf.summary.write("nowriter", 1.0, step=1))
    w.flush()
    events = [(step, tag, plugin, desc, (value[0], [_canonical_graph(b) for b in value[1]]))
              if plugin == "graphs" else (step, tag, plugin, desc, value)
              for step, tag, plugin, desc, value in read_events(logdir)]
    return results, events, _read_graphs(logdir)


@parity
def test_write_audio_graph_errors(tf):
    from .harness import raises
    w, _ = _writer(tf)
    with w.as_default(step=1):
        return (raises(tf.summary.graph, 3), raises(tf.summary.audio, "a", tf.zeros([2, 3]), 8000),
                raises(tf.summary.audio, "a", tf.zeros([1, 3, 1]), 8000, encoding="mp3"),
                raises(tf.summary.write, "x", 1.0, metadata=3))
