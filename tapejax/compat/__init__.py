"""``tapejax.compat``: ``tf.compat.v1`` and TF's small namespaces around the tape.

``v1`` holds the graph-era names TF1-style code reaches
(``tapejax.compat.v1.get_default_graph().gradient_override_map({...})`` is the
same context as ``tapejax.gradient_override_map``; ``import tapejax.compat.v1``
works too).  ``debugging`` is ``tf.debugging``, ``config`` ``tf.config``, ``device``
holds ``tf.device`` (re-exported as ``tapejax.debugging``, ``tapejax.config``,
``tapejax.device``).  See README.md here for the layout.
"""
from . import v1

__all__ = ["v1"]
