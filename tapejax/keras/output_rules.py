"""tf_keras' rules for the losses, targets and weights of a model with several outputs.

``compile`` / ``fit`` / ``evaluate`` are Keras 3's, whose ``CompileLoss`` and ``CompileMetrics``
parted from tf_keras for a model whose outputs are a list (a functional model's outputs, named by
their layers):

* an output with no loss (``loss={"cls": ...}`` leaving it out, ``{"reg": None}``, ``[..., None]``:
  the built-in-methods guide's "pass None") needs no target: tf_keras takes ``y`` for the outputs
  with losses only (a dict without that key, or the one array); Keras 3 raised ``KeyError`` or
  ``ValueError`` (a loss dict must name every output);
* such a model logs each output's loss (``cls_loss``) whenever it has several outputs, as
  tf_keras does; Keras 3 only when more than one output has a loss;
* ``sample_weight`` may be a dict keyed by output name (Keras 3 mapped a dict of targets to the
  outputs' order, but looked the weights up by position: ``KeyError: 0``).

``install`` wraps ``CompileLoss.__init__`` / ``build`` / ``call`` and ``CompileMetrics._flatten_y``.
"""
from __future__ import annotations

from typing import Any

_ORIG: dict = {}


def _names_of(names: Any, keys: Any) -> bool:
    return bool(names) and isinstance(keys, dict) and set(keys) <= set(names)


def _init(self, loss, loss_weights=None, reduction="sum_over_batch_size", output_names=None):
    if output_names and _names_of(output_names, loss) and len(output_names) > 1:   # (one left out: no loss)
        loss = {name: loss.get(name) for name in output_names}
    _ORIG["init"](self, loss, loss_weights, reduction, output_names)


def _lossless(self) -> list:
    """The output names with no loss, in order (of a dict or list of losses)."""
    loss, names = self._user_loss, self.output_names or []
    if isinstance(loss, dict):
        return [n for n in names if loss.get(n) is None]
    if isinstance(loss, (list, tuple)) and len(loss) == len(names):
        return [n for n, fn in zip(names, loss) if fn is None]
    return []


def _targets(self, y_true, y_pred):
    """``y`` for the outputs with losses only, spread over all outputs (None for the others)."""
    names = self.output_names
    if not (isinstance(y_pred, (list, tuple)) and names and len(names) == len(y_pred) and len(names) > 1):
        return y_true
    lossless = _lossless(self)
    if isinstance(y_true, dict) and set(y_true) < set(names) and set(names) - set(y_true) <= set(lossless):
        return [y_true.get(n) for n in names]
    with_loss = [n for n in names if n not in lossless]
    if lossless and len(with_loss) == 1 and not isinstance(y_true, (dict, list, tuple)):
        return [y_true if n in with_loss else None for n in names]
    if lossless and isinstance(y_true, (list, tuple)) and len(y_true) == len(with_loss) < len(names):
        given = dict(zip(with_loss, y_true))
        return [given.get(n) for n in names]
    return y_true


def _build(self, y_true, y_pred):
    _ORIG["build"](self, y_true, y_pred)
    names = self.output_names
    if len(self._flat_losses) == 1 and isinstance(y_pred, (list, tuple)) and names and len(names) > 1:
        from keras.src import metrics as metrics_module
        self._tracker.add_to_store("metrics", metrics_module.Mean(name=f"{self._flat_losses[0].name}_loss"))


def _call(self, y_true, y_pred, sample_weight=None):
    names = self.output_names
    y_true = _targets(self, y_true, y_pred)
    if isinstance(sample_weight, dict) and isinstance(y_pred, (list, tuple)) and names \
            and len(names) == len(y_pred) and set(sample_weight) == set(names):
        sample_weight = [sample_weight[name] for name in names]
    return _ORIG["call"](self, y_true, y_pred, sample_weight)


def _flatten_y(self, y):
    names = self._resolved_output_names
    if isinstance(y, dict) and names is not None and _names_of(names, y):
        return [y.get(name) for name in names]   # (no target for an output with no metric)
    return _ORIG["flatten_y"](self, y)


def install() -> None:
    from keras.src.trainers.compile_utils import CompileLoss, CompileMetrics
    if _ORIG:
        return
    _ORIG.update(init=CompileLoss.__init__, build=CompileLoss.build, call=CompileLoss.call,
                 flatten_y=CompileMetrics._flatten_y)
    setattr(CompileLoss, "__init__", _init)
    setattr(CompileLoss, "build", _build)
    setattr(CompileLoss, "call", _call)
    setattr(CompileMetrics, "_flatten_y", _flatten_y)
