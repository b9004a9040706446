"""``tf.train.TrackableView`` and ``tf.train.CheckpointView``: the object graph of live objects and
of a written checkpoint, and how they match.

``TrackableView(root)`` walks live objects by their checkpoint children (``trackable.children``:
Modules, optimizers, ``Checkpoint``, containers, registered kinds), breadth first, as a save does
(``graph.build``).  ``CheckpointView(save_path)`` reads a checkpoint's saved graph (any format
``storage.open_checkpoint`` reads: tapejax's, TF's, the first ``.npz``) and names its nodes by
the ids a save gives them (root 0, breadth first; optimizer slots are not children, as in TF).
``match(obj)`` pairs node ids with live objects along equal child names from the root;
``diff(obj)`` adds what is only in the checkpoint (node ids) and only in the objects.
"""
from __future__ import annotations

import collections
import logging
import os
import weakref
from typing import Any

from . import storage as _storage, trackable as _tr
from .reader import _filename

__all__ = ["CheckpointView", "TrackableView"]

_log = logging.getLogger("tapejax")


def _ident(obj: Any) -> int:
    return _tr.value_id(obj) if _tr.is_value(obj) else id(obj)


class TrackableView:
    """``tf.train.TrackableView(root)``: the checkpoint dependencies of ``root``'s objects."""

    def __init__(self, root: Any):
        try:
            self._root_ref: Any = weakref.ref(root)
        except TypeError:   # (a list or dict: held strongly)
            self._root_ref = root
        self._weak = isinstance(self._root_ref, weakref.ref)

    @classmethod
    def children(cls, obj: Any, save_type: Any = None, **kwargs: Any) -> dict:
        """``{name: child}``: the objects ``obj`` saves under those names."""
        return dict(_tr.children(obj))

    @property
    def root(self) -> Any:
        if self._weak:
            obj = self._root_ref()
            assert obj is not None, "the root object of this TrackableView was deleted"
            return obj
        return self._root_ref

    def descendants(self) -> list:
        """Every object reachable from the root, breadth first, the root first, each once."""
        seen = {_ident(self.root)}
        order = []
        queue = collections.deque([self.root])
        while queue:
            obj = queue.popleft()
            order.append(obj)
            for _, child in _tr.children(obj):
                if _ident(child) not in seen:
                    seen.add(_ident(child))
                    queue.append(child)
        return order


class CheckpointView:
    """``tf.train.CheckpointView(save_path)``: the saved object graph of a checkpoint (a prefix
    returned by ``save``/``write``, or a directory: its latest checkpoint)."""

    def __init__(self, save_path: Any):
        path = _filename(os.fspath(save_path) if isinstance(save_path, os.PathLike) else save_path)
        self._graph = _storage.open_checkpoint(path).graph

    def children(self, node_id: int) -> dict:
        """``{child name: node id}`` of node ``node_id``."""
        if not isinstance(node_id, int) or not 0 <= node_id < len(self._graph.nodes):
            raise IndexError(f"Argument `node_id` must be a node of this checkpoint (0 to "
                             f"{len(self._graph.nodes) - 1}); got {node_id!r}")
        return {c.name: c.node for c in self._graph.nodes[node_id].children}

    def descendants(self) -> list:
        """The node ids reachable from the root by children, breadth first (the root first)."""
        seen = {0}
        order = [0]
        queue = collections.deque([0])
        while queue:
            for c in self._graph.nodes[queue.popleft()].children:
                if c.node not in seen:
                    seen.add(c.node)
                    order.append(c.node)
                    queue.append(c.node)
        return order

    def match(self, obj: Any) -> dict:
        """``{node id: live object}`` for the nodes reached from the root along child names that
        ``obj``'s objects also have."""
        if not (_tr.is_trackable(obj) or _tr.is_container(obj)):
            raise ValueError(f"Expected a Trackable, got {obj} of type {type(obj)}.")
        matched: dict = {0: obj}
        queue = collections.deque([(0, obj)])
        visited: set = set()
        while queue:
            node, live = queue.popleft()
            kids = dict(_tr.children(live))
            for name, child_node in self.children(node).items():
                if child_node in visited or child_node == 0 or name not in kids:
                    continue
                current = matched.get(child_node)
                if current is None:
                    matched[child_node] = kids[name]
                    queue.append((child_node, kids[name]))
                elif current is not kids[name]:
                    _log.warning("Inconsistent references when matching the checkpoint into this object graph. "
                                 "The referenced objects are: (%s and %s).", current, kids[name])
            visited.add(node)
        return matched

    def diff(self, obj: Any) -> tuple:
        """``(match(obj), node ids only in the checkpoint, objects only in obj's graph)``."""
        matched = self.match(obj)
        only_ckpt = [n for n in self.descendants() if n not in matched]
        ids = {_ident(o) for o in matched.values()}
        only_live = [o for o in TrackableView(obj).descendants() if _ident(o) not in ids]
        return matched, only_ckpt, only_live
