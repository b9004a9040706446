"""Reading a checkpoint written by TensorFlow (``tf.train.Checkpoint.save`` / ``write``).

A TF checkpoint is a tensor bundle (``prefix.index`` + ``prefix.data-*``)
whose ``_CHECKPOINTABLE_OBJECT_GRAPH`` entry is a serialized
``TrackableObjectGraph`` proto.  With TensorFlow installed, this module reads
both through TF's own reader (``tf.train.load_checkpoint``) and turns the
proto into the ``SavedGraph`` records every tapejax restore matches against,
so a TF user's trained weights restore into the tapejax objects at the same
attribute paths, deferred restoration and status checks included.  Values
come back as NumPy arrays; TF's int64 counters (``save_counter``, an
optimizer's ``iter``) restore into tapejax's int32 ones (without JAX's x64
mode) when the value fits.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from . import graph as _g
from .graph import SavedGraph, ValueSpec

OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"


def _tf():
    try:
        import tensorflow as tf
    except ImportError as e:
        raise ImportError("reading a checkpoint written by TensorFlow needs TensorFlow: "
                          "pip install 'tapejax[tf]'") from e
    return tf


def graph_from_proto(data: bytes) -> SavedGraph:
    """A serialized ``TrackableObjectGraph`` as a SavedGraph."""
    from tensorflow.core.protobuf import trackable_object_graph_pb2
    proto = trackable_object_graph_pb2.TrackableObjectGraph()
    proto.ParseFromString(data)
    nodes = []
    for n in proto.nodes:
        nodes.append(_g.SavedNode(
            [_g.ChildRef(c.local_name, c.node_id) for c in n.children],
            [_g.Attribute(a.name, a.full_name, a.checkpoint_key) for a in n.attributes],
            [_g.SlotEntry(s.original_variable_node_id, s.slot_name, s.slot_variable_node_id)
             for s in n.slot_variables]))
    return SavedGraph(nodes)


class TFData:
    """A checkpoint written by TensorFlow."""

    def __init__(self, path: str):
        tf = _tf()
        self.path = path
        self._reader = tf.train.load_checkpoint(path)
        shapes = self._reader.get_variable_to_shape_map()
        dtypes = self._reader.get_variable_to_dtype_map()
        if OBJECT_GRAPH_KEY not in shapes:
            from ..core.errors import DataLossError
            raise DataLossError(None, None, f"{path} is a name-based TF1 checkpoint (no {OBJECT_GRAPH_KEY}); "
                                "tapejax restores object-based checkpoints (tf.train.Checkpoint)")
        self.graph = graph_from_proto(self._reader.get_tensor(OBJECT_GRAPH_KEY))
        self.specs = {k: ValueSpec(tuple(int(d) for d in shapes[k]), np.dtype(dtypes[k].as_numpy_dtype).name)
                      for k in shapes if k != OBJECT_GRAPH_KEY}

    def read(self, targets: Sequence[Any]) -> list[Any]:
        return [self._reader.get_tensor(t.key) for t in targets]


__all__ = ["TFData", "graph_from_proto", "OBJECT_GRAPH_KEY"]
