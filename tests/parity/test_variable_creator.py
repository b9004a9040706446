"""tf.variable_creator_scope (tapejax/core/creator.py): the creator chain every tf.Variable call
goes through, under TensorFlow and tapejax."""
from .harness import parity, raises


@parity
def test_variable_creator_scope_chain(tf):
    """Creators nest (innermost called first), see every argument by name, may change them or
    return something else; outside the scope Variables are made directly."""
    calls = []
    seen = {}

    def outer(next_creator, **kwargs):
        calls.append("outer")
        return next_creator(**kwargs)

    def inner(next_creator, **kwargs):
        calls.append("inner")
        seen.update(kwargs)
        kwargs["trainable"] = False
        return next_creator(**kwargs)
    with tf.variable_creator_scope(outer):
        with tf.variable_creator_scope(inner):
            v = tf.Variable(2.0, name="w")
    w = tf.Variable(3.0)
    with tf.variable_creator_scope(lambda next_creator, **kw: tf.constant(5.0)):
        replaced = tf.Variable(1.0)
    with tf.variable_creator_scope(3):
        bad = raises(tf.Variable, 1.0)
    keys = sorted(k for k in seen if k not in ("synchronization", "aggregation"))
    return (calls, v.trainable, v.numpy(), w.trainable, replaced, bad, keys, seen["name"], seen["dtype"],
            seen["trainable"], seen["initial_value"])
