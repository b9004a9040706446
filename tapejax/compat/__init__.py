"""``tapejax.compat``: ``tf.compat.v1`` and TF's small namespaces around the tape.

``v1`` holds the graph-era names TF1-style code reaches
(``tapejax.compat.v1.get_default_graph().gradient_override_map({...})`` is the
same context as ``tapejax.gradient_override_map``; ``import tapejax.compat.v1``
works too).  ``debugging`` is ``tf.debugging`` (re-exported as
``tapejax.debugging``).  See README.md here for the layout.
"""
from . import debugging, v1

__all__ = ["v1"]  # (TF's tf.compat; the namespace modules here are re-exported at the top level)
