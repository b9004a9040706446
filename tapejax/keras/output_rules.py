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

A model compiled with one of tapejax's (tf_keras') optimizers also lists its metrics as tf_keras
does, in ``metrics_names`` and in ``evaluate``'s list: the loss, each output's loss, then per output
its metrics and its weighted metrics, by their logged names (``cls_accuracy``), then the model's
own.  Keras 3 lists the compiled metrics as one (``compile_metrics``), and orders ``evaluate``'s
list of a model of several outputs by name.

``install`` wraps ``CompileLoss.__init__`` / ``build`` / ``call``, ``CompileMetrics._flatten_y`` and
``Trainer.metrics_names`` / ``_flatten_metrics_in_order``.
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


def _compiled_names(cm) -> list:
    """A built ``CompileMetrics``' logged names in tf_keras' order: per output, its metrics then its
    weighted ones (Keras 3's ``result`` gives all the metrics, then all the weighted ones)."""
    keys = list(cm.result())
    tags = [(i, w) for w, flat in enumerate((cm._flat_metrics, cm._flat_weighted_metrics))
            for i, mls in enumerate(flat) if mls for _ in mls.metrics]
    if len(tags) != len(keys):
        return keys
    return [k for _, k in sorted(zip(tags, keys), key=lambda p: p[0])]


def _tf_keras_names(self) -> list:
    """tf_keras' ``metrics_names``: nothing before the model met data, then the loss, each output's
    loss, the compiled metrics (``_compiled_names``), the model's and its layers' own."""
    loss, cm = self._compile_loss, self._compile_metrics
    per_output = list(loss.metrics) if loss is not None else []
    if loss is not None and not loss.built:
        return []
    first = [m for m in self.metrics if m is self._loss_tracker] + per_output
    rest = [m for m in self.metrics if m is not cm and all(m is not f for f in first)]
    compiled = _compiled_names(cm) if cm is not None and cm.built else []
    return [m.name for m in first] + compiled + [m.name for m in rest]


def _metrics_names(self) -> list:
    from .trainer import _tapejax_optimizer
    return _tf_keras_names(self) if _tapejax_optimizer(self) else _ORIG["metrics_names"].fget(self)


def _flatten_metrics_in_order(self, logs):
    from .trainer import _tapejax_optimizer
    if not _tapejax_optimizer(self):
        return _ORIG["flatten_in_order"](self, logs)
    names = _tf_keras_names(self)
    results = [logs[n] for n in names if n in logs] + [logs[k] for k in sorted(logs) if k not in names]
    return results[0] if len(results) == 1 else results


def install() -> None:
    from keras.src.trainers.compile_utils import CompileLoss, CompileMetrics
    from keras.src.trainers.trainer import Trainer
    if _ORIG:
        return
    _ORIG.update(metrics_names=Trainer.metrics_names, flatten_in_order=Trainer._flatten_metrics_in_order)
    setattr(Trainer, "metrics_names", property(_metrics_names, doc=Trainer.metrics_names.__doc__))
    setattr(Trainer, "_flatten_metrics_in_order", _flatten_metrics_in_order)
    _ORIG.update(init=CompileLoss.__init__, build=CompileLoss.build, call=CompileLoss.call,
                 flatten_y=CompileMetrics._flatten_y)
    setattr(CompileLoss, "__init__", _init)
    setattr(CompileLoss, "build", _build)
    setattr(CompileLoss, "call", _call)
    setattr(CompileMetrics, "_flatten_y", _flatten_y)
