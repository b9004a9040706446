"""``tapejax.compat``: ``tf.compat.v1`` and TF's small namespaces around the tape.

``v1`` holds the graph-era names TF1-style code reaches
(``tapejax.compat.v1.get_default_graph().gradient_override_map({...})`` is the
same context as ``tapejax.gradient_override_map``; ``import tapejax.compat.v1``
works too).  ``debugging`` is ``tf.debugging``, ``config`` ``tf.config``, ``device``
holds ``tf.device`` (re-exported as ``tapejax.debugging``, ``tapejax.config``,
``tapejax.device``); ``dimension_value`` / ``dimension_at_index`` read a ``TensorShape``'s sizes
as TF1 / TF2 code both can.  See README.md here for the layout.
"""
from ..core.shape import dimension_at_index, dimension_value
from . import v1

__all__ = ["v1", "dimension_value", "dimension_at_index"]
