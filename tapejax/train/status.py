"""What ``Checkpoint.restore`` returns: TF's load status objects.

``CheckpointLoadStatus`` asks its ``Restoration`` what was matched, after a
sweep of the waits (a Variable appended to a list since the restore is
matched first), with TF's three assertions and its messages:

* ``assert_existing_objects_matched()``: every value (Variable, optimizer
  slot) reachable from the root now has a value in the checkpoint, else
  ``AssertionError("Found N Python objects that were not bound to
  checkpointed values ...")``.  A layer that is not built yet passes.
* ``assert_consumed()``: that, and every value in the checkpoint found its
  object (``"Unresolved object in checkpoint (root).model.w: ..."``), and no
  attribute was left over.  Passes once deferred restorations are complete.
* ``assert_nontrivial_match()``: something besides the root matched.

``expect_partial()`` silences the warnings logged (on the ``tapejax``
logger) when the restore is forgotten with values left unrestored.  All of
them return the status, so they chain.  ``restore(None)`` returns an
``InitializationOnlyStatus`` whose assertions always fail, as TF's.
``run_restore_ops`` and ``initialize_or_restore`` exist for TF1-style code and
do nothing: values are assigned eagerly.
"""
from __future__ import annotations

from typing import Any

from . import graph as _g, restore as _restore


def _node_text(node: _g.SavedNode) -> str:
    parts = [f'attributes {{ name: "{a.name}" full_name: "{a.full_name}" checkpoint_key: "{a.key}" }}'
             for a in node.attributes]
    parts += [f'children {{ local_name: "{c.name}" node_id: {c.node} }}' for c in node.children]
    return " ".join(parts) or "{}"


class CheckpointLoadStatus:
    """The status of a restore (``tf.train.Checkpoint.restore``'s return value)."""

    def __init__(self, restoration: "_restore.Restoration", root: Any):
        self._restoration = restoration
        self._root = root

    @property
    def save_path(self) -> str:
        return self._restoration.path

    def _unmatched_objects(self) -> list:
        _restore.sweep()
        live = _g.build(self._root).values
        bound = {id(o) for o in self._restoration.bound_objects()}
        return [o for o in live.values() if id(o) not in bound]

    def assert_existing_objects_matched(self) -> "CheckpointLoadStatus":
        """Raise AssertionError if a value reachable from the root has no value in the checkpoint."""
        unmatched = self._unmatched_objects()
        if unmatched:
            shown = unmatched[:10]
            raise AssertionError(
                f"Found {len(unmatched)} Python objects that were not bound to checkpointed values, likely "
                f"due to changes in the Python program. Showing {len(shown)} of {len(unmatched)} unmatched "
                f"objects: {shown}")
        return self

    def assert_consumed(self) -> "CheckpointLoadStatus":
        """Raise AssertionError unless every object and every checkpointed value were matched."""
        self.assert_existing_objects_matched()
        r = self._restoration
        names = None
        for i, node in enumerate(r.graph.nodes):
            if node.attributes and i not in r.matched:
                names = names or r.graph.node_names()
                raise AssertionError(f"Unresolved object in checkpoint {names.get(i, i)}: {_node_text(node)}")
        if r.unused:
            names = names or r.graph.node_names()
            lines = [f"{names.get(i, i)} ({r.bound(i)}): {attrs}" for i, attrs in r.unused.items()]
            raise AssertionError("Unused attributes in these objects (the attributes exist in the checkpoint "
                                 "but were not restored):\n" + "\n".join(lines))
        return self

    def assert_nontrivial_match(self) -> "CheckpointLoadStatus":
        """Raise AssertionError if nothing but the root matched."""
        _restore.sweep()
        if len(self._restoration.matched) <= 1:
            unmatched = self._unmatched_objects()
            if unmatched:
                raise AssertionError("Nothing except the root object matched a checkpointed value. Typically "
                                     "this means that the checkpoint does not match the Python program. The "
                                     f"following objects have no matching checkpointed value: {unmatched}")
            raise AssertionError(f"Nothing to load. No dependencies have been added to {self._root} yet.")
        return self

    def expect_partial(self) -> "CheckpointLoadStatus":
        """Silence the warnings about values left unrestored."""
        self._restoration.report.expect_partial = True
        return self

    def run_restore_ops(self, session: Any = None) -> None:
        """Values are restored eagerly: nothing to run (TF's graph-mode API)."""

    def initialize_or_restore(self, session: Any = None) -> None:
        """Values are restored eagerly: nothing to run (TF's graph-mode API)."""


class InitializationOnlyStatus:
    """``restore(None)``: nothing is restored; every assertion fails (as TF)."""

    _MSG = "No checkpoint specified (save_path=None); nothing is being restored."

    def __init__(self, root: Any):
        self._root = root

    def assert_consumed(self):
        raise AssertionError(self._MSG)

    def assert_existing_objects_matched(self):
        raise AssertionError(self._MSG)

    def assert_nontrivial_match(self):
        raise AssertionError(self._MSG)

    def expect_partial(self) -> "InitializationOnlyStatus":
        return self

    def run_restore_ops(self, session: Any = None) -> None:
        raise AssertionError("No checkpoint specified, so no restore ops are available (save_path=None to "
                             "Saver.restore).")

    def initialize_or_restore(self, session: Any = None) -> None:
        """Variables are initialised when created: nothing to run."""


__all__ = ["CheckpointLoadStatus", "InitializationOnlyStatus"]
