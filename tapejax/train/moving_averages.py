"""``tf.train.ExponentialMovingAverage``: shadow Variables that follow other Variables.

``apply(var_list)`` creates, for each Variable it has not seen, a non-trainable shadow Variable
holding the Variable's current value (named ``<name>/ExponentialMovingAverage``; inside a
``tapejax.function``, as TF, the value before the call: the shadow is made in ``init_scope``), then moves every
shadow towards its Variable: ``shadow -= (shadow - var) * (1 - decay)``, ``decay`` lowered to
``(1 + n) / (10 + n)`` early in training when ``num_updates`` (n) is given.  As TF executing
eagerly (and in ``tf.function``, where tapejax's functions run): only Variables of a floating dtype
are accepted (zero debiasing applies to TF1 graph tensors only), ``average(var)`` gives the shadow,
and the object is not tracked by checkpoints (save the shadows through ``average``).

A shadow's name is unique in the process, as TF's: TF's slot creator opens
``variable_scope(None, "<var>/<name>")``, whose default name takes the first ``_<n>`` suffix its
scope counts have not seen, so two Variables named ``v`` (or two averages of one Variable) get
``v/ExponentialMovingAverage`` and ``v/ExponentialMovingAverage_1``; the scope ignores the
current ``name_scope`` (the Variable's own name already holds it).
"""
from typing import Any, Optional

from ..compile.host import init_scope
from ..core import dtypes as _dtypes
from ..core.convert import convert_to_tensor
from ..core.variable import Variable
from ..ops.math import cast, minimum
from .module import name_scope

_SCOPE_COUNTS: "dict[str, int]" = {}   # TF's variable-scope counts of the eager graph: the process's

_FLOATS = (_dtypes.bfloat16, _dtypes.float16, _dtypes.float32, _dtypes.float64)


class ExponentialMovingAverage:
    """TF's ``tf.train.ExponentialMovingAverage`` (see the module docstring)."""

    def __init__(self, decay: Any, num_updates: Any = None, zero_debias: bool = False,
                 name: str = "ExponentialMovingAverage"):
        self._decay = decay
        self._num_updates = num_updates
        self._zero_debias = zero_debias
        self._name = name
        self._averages: "dict[int, tuple[Variable, Variable]]" = {}   # id(var) -> (var, shadow)

    @property
    def name(self) -> str:
        return self._name

    def apply(self, var_list: "Optional[list]" = None) -> None:
        """Create the shadows not yet made, then move each shadow towards its Variable."""
        if var_list is None:   # (TF: the global trainable collection, empty when executing eagerly)
            var_list = []
        var_list = list(var_list)
        for v in var_list:
            if not isinstance(v, Variable):
                raise TypeError("tf.train.ExponentialMovingAverage does not support non-Variable tensors when "
                                "eager execution is enabled.")
            if v.dtype.base_dtype not in _FLOATS:
                raise TypeError(f"The variables must be half, float, or double: {v.name}")
        for v in var_list:
            if id(v) not in self._averages:
                # made outside any function being traced (TF's init_scope): from the value the
                # Variable holds there, before a compiled step's own updates
                with init_scope(), name_scope(None):
                    shadow = Variable(v.read_value(), trainable=False, name=_unique_scope(f"{_op_name(v)}/{self._name}"))
                self._averages[id(v)] = (v, shadow)
        decay = convert_to_tensor(self._decay, dtype=_dtypes.float32)
        if self._num_updates is not None:
            n = convert_to_tensor(cast(self._num_updates, _dtypes.float32))
            decay = minimum(decay, (1.0 + n) / (10.0 + n))
        rate = 1.0 - decay
        for v in var_list:
            shadow = self._averages[id(v)][1]
            shadow.assign_sub((shadow - v) * cast(rate, v.dtype))

    def average(self, var: Any) -> "Optional[Variable]":
        """The shadow Variable of ``var`` (None if ``apply`` never saw it)."""
        entry = self._averages.get(id(var))
        return entry[1] if entry is not None and entry[0] is var else None

    def average_name(self, var: Any) -> str:
        """The shadow's name (without ``:0``): ``<var's name>/<this object's name>``."""
        shadow = self.average(var)
        return _op_name(shadow) if shadow is not None else f"{_op_name(var)}/{self._name}"


def _unique_scope(name: str) -> str:
    """``name``, or ``name_<n>`` with the first ``n`` not yet opened, counted as opened (TF's
    ``variable_scope._get_unique_variable_scope``)."""
    if _SCOPE_COUNTS.get(name, 0):
        idx = 1
        while _SCOPE_COUNTS.get(f"{name}_{idx}", 0):
            idx += 1
        name = f"{name}_{idx}"
    _SCOPE_COUNTS[name] = _SCOPE_COUNTS.get(name, 0) + 1
    return name


def _op_name(v: Any) -> str:
    name = str(v.name)
    return name[:-2] if name.endswith(":0") else name


__all__ = ["ExponentialMovingAverage"]
