"""Checkpoints in TensorFlow's format: reading one TF wrote (``tf.train.Checkpoint.save`` /
``write``), and writing one TF reads (``Checkpoint.write(..., format="tf")``).

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

``write`` is the other way: the tapejax object graph (``graph.build``: TF's keys, which the
parity tests compare with TF's own) as a ``TrackableObjectGraph`` proto and every value into
one tensor bundle through TF's ``SaveV2`` op, so that ``tf.train.Checkpoint(...).restore`` and
``tf.train.load_checkpoint`` in TensorFlow read it (tapejax reads it too, as any TF checkpoint).
The counters tapejax narrowed to int32 (``core.counters``) are written as TF's int64.
Optimizer state that only tapejax has (an optax optimizer's groups) is not written.
"""
from __future__ import annotations

import os
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


def graph_to_proto(graph: SavedGraph) -> bytes:
    """A SavedGraph as a serialized ``TrackableObjectGraph`` (``graph_from_proto``'s inverse;
    groups, which TF has no record for, left out)."""
    from tensorflow.core.protobuf import trackable_object_graph_pb2
    proto = trackable_object_graph_pb2.TrackableObjectGraph()
    for node in graph.nodes:
        n = proto.nodes.add()
        for c in node.children:
            n.children.add(node_id=c.node, local_name=c.name)
        for a in node.attributes:
            n.attributes.add(name=a.name, full_name=a.full_name, checkpoint_key=a.key)
        for e in node.slots:
            n.slot_variables.add(original_variable_node_id=e.variable, slot_name=e.name,
                                 slot_variable_node_id=e.slot)
    return proto.SerializeToString()


def write(path: str, live: _g.LiveGraph) -> None:
    """Write ``live`` (its graph and values) as a TF checkpoint at prefix ``path``
    (``path.index``, ``path.data-00000-of-00001``)."""
    import jax

    from ..core.counters import is_narrowed
    from .trackable import value_kind
    tf = _tf()
    keys = list(live.values)
    objs = [live.values[k] for k in keys]
    values = []
    for obj in objs:
        kind = value_kind(obj)
        assert kind is not None   # (the graph holds values only under VARIABLE_VALUE)
        values.append(kind.read(obj))   # (a pending update is computed now)
    host = jax.device_get(values)
    tensors = [tf.constant(np.asarray(v, np.int64) if is_narrowed(obj) else np.asarray(v))
               for obj, v in zip(objs, host)]
    names = keys + [OBJECT_GRAPH_KEY]
    tensors.append(tf.constant(graph_to_proto(live.graph)))
    folder = os.path.dirname(path)
    if folder:
        os.makedirs(folder, exist_ok=True)
    tf.raw_ops.SaveV2(prefix=path, tensor_names=names, shape_and_slices=[""] * len(names), tensors=tensors)


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


__all__ = ["TFData", "graph_from_proto", "graph_to_proto", "write", "OBJECT_GRAPH_KEY"]
