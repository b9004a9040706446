"""``tf.compat.v1``: the graph-era names TF1-style code reaches, as far as tapejax has them.

``tapejax.compat.v1.get_default_graph().gradient_override_map({...})`` is the
same context as ``tapejax.gradient_override_map`` (there is one global
"graph": the op registry); ``RegisterGradient``, ``gradients``,
``stop_gradient``, ``custom_gradient`` and ``GradientTape`` are the TF2 names; ``Dimension`` is
the element of ``TensorShape.dims``.
"""
from ..autodiff.custom import (
    RegisterGradient,
    gradient_override_map,
    gradients_v1 as gradients,
    hessians,
    stop_gradient,
)
from ..autodiff.custom_gradient import custom_gradient
from ..autodiff.nodes import UnconnectedGradients
from ..autodiff.tape import GradientTape
from ..core.shape import Dimension, TensorShape


class Graph:
    """The default graph of ``compat.v1``: holds the gradient override context.

    tapejax has no graphs; this object exists so that TF1 code written as
    ``g = tf.compat.v1.get_default_graph()`` /
    ``with g.gradient_override_map({"Identity": "CustomGrad"}):`` runs.
    """

    def gradient_override_map(self, op_type_map):
        """See ``tapejax.gradient_override_map`` (honoured by every gradient API)."""
        return gradient_override_map(op_type_map)

    def __repr__(self):
        return "<tapejax.compat.v1.Graph (the default graph)>"


_DEFAULT_GRAPH = Graph()


def get_default_graph():
    """``tf.compat.v1.get_default_graph()``: the one default graph."""
    return _DEFAULT_GRAPH


__all__ = ["get_default_graph", "Graph", "RegisterGradient", "gradients", "hessians", "stop_gradient",
           "custom_gradient", "GradientTape", "UnconnectedGradients", "Dimension", "TensorShape"]
