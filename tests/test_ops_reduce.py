"""tapejax/ops/reduce.py: the gradient conventions of its clipping ops where TF's formula has a
tie (checked against TF 2.21's numbers)."""
import numpy as np
import pytest

import tapejax as tf


def _clip_global_grads(clip, use=None):
    """Value and gradients of ``sum(clipped * cotangents) + 0.5 * norm`` for
    ``clip_by_global_norm([[3, 0], [4]], clip, use_norm=use)`` (global norm 5)."""
    a, b = tf.constant([3.0, 0.0]), tf.constant([4.0])
    srcs = [a, b] if use is None else [a, b, tf.constant(use)]
    with tf.GradientTape() as t:
        t.watch(srcs)
        (ca, cb), n = tf.clip_by_global_norm([a, b], clip, use_norm=None if use is None else srcs[2])
        y = tf.reduce_sum(ca * [1.0, 2.0]) + tf.reduce_sum(cb * 3.0) + 0.5 * n
    return [y.numpy()] + [g.numpy() for g in t.gradient(y, srcs)]


@pytest.mark.parametrize("clip,use,want", [
    # norm == clip_norm: TF's ``minimum(1 / norm, 1 / clip_norm)`` gives the tie to the norm, so
    # the gradient is the projection's (a - a * (a . v) / |a|^2 with v the cotangents); JAX's
    # minimum would split it 0.5 / 0.5 ([0.4, 2.0], [2.2]).
    (5.0, None, [17.5, [-0.5, 2.0], [1.0]]),
    (5.0, 5.0, [17.5, [1.0, 2.0], [3.0], -2.5]),          # d/d use_norm: 0.5 - 15 / 5
    (2.0, 2.0, [16.0, [1.0, 2.0], [3.0], -7.0]),          # d/d use_norm: 0.5 - 15 / 2
    # away from the tie (unchanged): clipped, and passed through
    (4.0, None, [14.5, [-0.34, 1.6], [0.88]]),
    (6.0, None, [17.5, [1.3, 2.0], [3.4]]),
])
def test_clip_by_global_norm_at_the_tie_differentiates_through_the_norm_as_tf(clip, use, want):
    got = _clip_global_grads(clip, use)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
