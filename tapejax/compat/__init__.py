"""``tapejax.compat`` (``tf.compat``): ``v1``, the graph-era names TF1-style code reaches.

``tapejax.compat.v1.get_default_graph().gradient_override_map({...})`` is the same
context as ``tapejax.gradient_override_map``; ``import tapejax.compat.v1`` works too.
"""
from . import v1

__all__ = ["v1"]
