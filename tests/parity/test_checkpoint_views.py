"""tf.train.TrackableView and tf.train.CheckpointView (tapejax/train/views.py) under TensorFlow 2.21
and tapejax: the same program's node ids, children, descendants, match and diff."""
import os
import tempfile

from .harness import parity, raises


def _model(tf, with_extra=False, n_list=2):
    class M(tf.Module):
        def __init__(self):
            super().__init__()
            self.v = tf.Variable(1.0)
            self.sub = tf.Module()
            self.sub.w = tf.Variable([2.0, 3.0])
            self.lst = [tf.Variable(4.0), tf.Variable(5.0)][:n_list]
            if with_extra:
                self.extra = tf.Variable(6.0)
    return M()


def _describe(obj):
    """A live object as something both sides compare: a Variable's value, else its type's role."""
    if hasattr(obj, "numpy"):
        return obj.numpy()
    if isinstance(obj, (list, tuple)) or type(obj).__name__ == "ListWrapper":
        return f"list of {len(obj)}"
    return type(obj).__name__ if type(obj).__name__ in ("M", "Module") else "root"


@parity
def test_trackable_view(tf):
    m = _model(tf)
    view = tf.train.TrackableView(m)
    kids = view.children(m)
    return (sorted(kids), [_describe(o) for o in view.descendants()], view.root is m,
            sorted(tf.train.TrackableView.children(m.sub)))


@parity
def test_checkpoint_view_match_and_diff(tf):
    m = _model(tf)
    ck = tf.train.Checkpoint(model=m, step=tf.Variable(7))
    path = ck.write(os.path.join(tempfile.mkdtemp(prefix="parity-view-"), "ck"))
    view = tf.train.CheckpointView(path)
    matched = view.match(ck)
    other = _model(tf, with_extra=True, n_list=1)
    both, only_ckpt, only_live = view.diff(tf.train.Checkpoint(model=other))
    return (view.children(0), view.children(1), view.descendants(),
            {k: _describe(v) for k, v in matched.items() if k != 0},
            sorted(both), only_ckpt, [_describe(o) for o in only_live],
            {k: _describe(v) for k, v in view.match(m).items() if k != 0},
            raises(view.match, 3), raises(view.children, 99),
            raises(tf.train.CheckpointView, os.path.join(tempfile.mkdtemp(prefix="parity-view-"), "missing")))
