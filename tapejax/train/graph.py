"""The object graph of a checkpoint: typed records, TF's names, and the walk that builds it.

A checkpoint stores, next to its arrays, the graph of the objects they came
from (TF's ``TrackableObjectGraph``): one ``SavedNode`` per object, reached
from the root (node 0) through named children.  A node that holds a value has
one ``Attribute`` (``VARIABLE_VALUE``) whose ``key`` is the array's name in
storage; an optimizer's node lists its slots (``SlotEntry``: the Variable's
node, the slot's name, the slot's node) and groups (``GroupEntry``).

``build(root)`` walks live objects breadth first, as TF does, so an object
reachable along several paths is saved once, under its shortest path, and
keys are TF's: the escaped child names from the root joined by ``/``, then
``/.ATTRIBUTES/VARIABLE_VALUE``; a slot's key is its Variable's path,
``/.OPTIMIZER_SLOT/``, the optimizer's path and the slot's name.  Restoring
walks a ``SavedGraph`` and the live objects together (``restore``); the same
records describe a checkpoint written by TF (``tf_format``) or by tapejax's
first ``.npz`` format (``storage``), so one matcher serves all three.
"""
from __future__ import annotations

import collections
import dataclasses
from typing import Any, NamedTuple, Optional

from . import trackable as _tr

ATTRIBUTES = ".ATTRIBUTES"
OPTIMIZER_SLOT = ".OPTIMIZER_SLOT"
OPTIMIZER_GROUP = ".OPTIMIZER_GROUP"


class ChildRef(NamedTuple):
    name: str
    node: int


class Attribute(NamedTuple):
    name: str        # "VARIABLE_VALUE"
    full_name: str   # the Variable's name ("dense/w")
    key: str         # the array's name in storage


class SlotEntry(NamedTuple):
    variable: int    # the node of the Variable the slot belongs to
    name: str        # "m", "v", "momentum" ...
    slot: int        # the slot's own node


class GroupEntry(NamedTuple):
    variables: tuple[int, ...]
    state: tuple[int, ...]


@dataclasses.dataclass
class SavedNode:
    children: list[ChildRef] = dataclasses.field(default_factory=list)
    attributes: list[Attribute] = dataclasses.field(default_factory=list)
    slots: list[SlotEntry] = dataclasses.field(default_factory=list)
    groups: list[GroupEntry] = dataclasses.field(default_factory=list)

    def has_values(self) -> bool:
        return bool(self.children or self.attributes or self.slots or self.groups)


class ValueSpec(NamedTuple):
    shape: tuple[int, ...]
    dtype: str   # NumPy's dtype name ("float32", "bfloat16")


@dataclasses.dataclass
class SavedGraph:
    """The saved object graph: ``nodes[0]`` is the root."""

    nodes: list[SavedNode]

    def node_names(self) -> dict[int, str]:
        """Node id -> TF's readable name: ``(root).model.dense.w``, and for a slot
        ``(root).optimizer's state 'm' for (root).model.w``."""
        names: dict[int, tuple[str, ...]] = {0: ("(root)",)}
        queue = collections.deque([0])
        while queue:
            i = queue.popleft()
            for c in self.nodes[i].children:
                if c.node not in names:
                    names[c.node] = names[i] + (c.name,)
                    queue.append(c.node)
        out = {i: ".".join(p) for i, p in names.items()}
        for i, node in enumerate(self.nodes):
            for s in node.slots:
                out[s.slot] = f"{out.get(i, '?')}'s state '{s.name}' for {out.get(s.variable, '?')}"
            for gi, g in enumerate(node.groups):
                for j, n in enumerate(g.state):
                    out[n] = f"{out.get(i, '?')}'s state {gi}/{j}"
        return out

    def to_json(self) -> list:
        return [{"children": [list(c) for c in n.children],
                 "attributes": [list(a) for a in n.attributes],
                 "slots": [list(s) for s in n.slots],
                 "groups": [[list(g.variables), list(g.state)] for g in n.groups]} for n in self.nodes]

    @classmethod
    def from_json(cls, data: list) -> "SavedGraph":
        return cls([SavedNode([ChildRef(str(c[0]), int(c[1])) for c in n.get("children", ())],
                              [Attribute(*map(str, a)) for a in n.get("attributes", ())],
                              [SlotEntry(int(s[0]), str(s[1]), int(s[2])) for s in n.get("slots", ())],
                              [GroupEntry(tuple(map(int, g[0])), tuple(map(int, g[1])))
                               for g in n.get("groups", ())])
                    for n in data])


def escape(name: str) -> str:
    """TF's escaping of a child name inside a key (``.`` -> ``..``, ``/`` -> ``.S``)."""
    return name.replace(".", "..").replace("/", ".S")


def value_key(path: tuple[str, ...]) -> str:
    return "/".join(escape(p) for p in path) + f"/{ATTRIBUTES}/{_tr.VARIABLE_VALUE}"


class LiveGraph(NamedTuple):
    """The graph of live objects about to be saved: the records, and the value object
    behind each storage key."""

    graph: SavedGraph
    values: dict[str, Any]


def build(root: Any) -> LiveGraph:
    """Walk the live objects from ``root`` (breadth first, TF's order) into a SavedGraph."""
    nodes: list[SavedNode] = []
    objs: list[Any] = []
    paths: list[tuple[str, ...]] = []
    index: dict[int, int] = {}          # identity of a visited object -> its node
    values: dict[str, Any] = {}

    def ident(obj: Any) -> int:
        return _tr.value_id(obj) if _tr.is_value(obj) else id(obj)

    def add(obj: Any, path: tuple[str, ...]) -> int:
        node = SavedNode()
        if _tr.is_value(obj):
            key = value_key(path)
            node.attributes.append(Attribute(_tr.VARIABLE_VALUE, _tr.value_name(obj), key))
            values[key] = obj
        index[ident(obj)] = len(nodes)
        nodes.append(node)
        objs.append(obj)
        paths.append(path)
        return len(nodes) - 1

    add(root, ())
    queue = collections.deque([0])
    while queue:
        i = queue.popleft()
        for name, child in _tr.children(objs[i]):
            j = index.get(ident(child))
            if j is None:
                j = add(child, paths[i] + (name,))
                queue.append(j)
            nodes[i].children.append(ChildRef(name, j))
    # optimizer state, after every regular node (as TF numbers slot variables)
    for i in range(len(objs)):
        obj = objs[i]
        if _tr.is_container(obj) or _tr.is_value(obj):
            continue
        for ref in _tr.slots(obj):
            vnode = index.get(_ref_id(ref.variable))
            if vnode is None:
                continue   # a slot of a Variable this checkpoint does not save
            key = (f"{'/'.join(escape(p) for p in paths[vnode])}/{OPTIMIZER_SLOT}/"
                   f"{'/'.join(escape(p) for p in paths[i])}/{escape(ref.name)}/{ATTRIBUTES}/{_tr.VARIABLE_VALUE}")
            snode = _add_state(nodes, objs, index, values, ref.slot, key)
            nodes[i].slots.append(SlotEntry(vnode, ref.name, snode))
        for gi, ref in enumerate(_tr.groups(obj)):
            vnodes = [index.get(_ref_id(v)) for v in ref.variables]
            if any(v is None for v in vnodes):
                continue
            state = []
            for j, s in enumerate(ref.state):
                key = (f"{'/'.join(escape(p) for p in paths[i])}/{OPTIMIZER_GROUP}/{gi}/{j}/"
                       f"{ATTRIBUTES}/{_tr.VARIABLE_VALUE}")
                state.append(_add_state(nodes, objs, index, values, s, key))
            nodes[i].groups.append(GroupEntry(tuple(v for v in vnodes if v is not None), tuple(state)))
    return LiveGraph(SavedGraph(nodes), values)


def _ref_id(v: Any) -> int:
    return v if isinstance(v, int) else _tr.value_id(v)


def _add_state(nodes: list, objs: list, index: dict, values: dict, obj: Any, key: str) -> int:
    node = SavedNode([], [Attribute(_tr.VARIABLE_VALUE, _tr.value_name(obj), key)])
    index[_tr.value_id(obj)] = len(nodes)
    nodes.append(node)
    objs.append(obj)
    values[key] = obj
    return len(nodes) - 1


def slots_from_lists(graph: SavedGraph) -> SavedGraph:
    """``graph`` with the per-Variable state of Keras's new optimizers (a node with an
    ``_iterations`` child) made matchable.  Both keep it in lists (``_momentums``, ``_velocities``)
    and index it again in ``_variables``:

    * tf_keras (TF 2.11+) matches the lists by position, in the order the optimizer builds its
      Variables: the lists stay children, ``_variables`` (and the unsaved ``_index_dict``) go,
      so that a restore waits on the lists alone (a live optimizer has no ``_variables`` order to
      agree with).
    * Keras 3 also saves ``_trainable_variables``, parallel to the lists: entry ``i`` of
      ``_momentums`` is the state of the Variable at entry ``i`` there, a node the model's path
      reaches too.  Each entry becomes a ``SlotEntry`` named by its list, matched to whichever
      live Variable that node is bound to (as a legacy ``.OPTIMIZER_SLOT`` entry), and the lists
      leave the children."""
    nodes = list(graph.nodes)
    for i, node in enumerate(nodes):
        names = {c.name: c.node for c in node.children}
        if "_iterations" not in names or "_variables" not in names:
            continue
        tv = names.get("_trainable_variables")
        trained = {} if tv is None else {c.name: c.node for c in nodes[tv].children}
        kept, slots = [], list(node.slots)
        for c in node.children:
            if c.name in ("_variables", "_index_dict", "_trainable_variables", "_trainable_variables_indices"):
                continue
            entries = nodes[c.node].children
            if trained and entries and not nodes[c.node].attributes and all(e.name in trained for e in entries):
                slots += [SlotEntry(trained[e.name], c.name, e.node) for e in entries]
                continue
            kept.append(c)
        nodes[i] = dataclasses.replace(node, children=kept, slots=slots)
    return SavedGraph(nodes)


def find(graph: SavedGraph, path: tuple[str, ...]) -> Optional[int]:
    """The node reached from the root along ``path`` (child names), or None."""
    node = 0
    for name in path:
        for c in graph.nodes[node].children:
            if c.name == name:
                node = c.node
                break
        else:
            return None
    return node


__all__ = ["ChildRef", "Attribute", "SlotEntry", "GroupEntry", "SavedNode", "SavedGraph", "ValueSpec",
           "LiveGraph", "build", "escape", "value_key", "find", "slots_from_lists"]
