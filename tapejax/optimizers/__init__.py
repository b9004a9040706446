"""Keras-2 optimizers on JAX (``tf.keras.optimizers``: tf_keras' new update rules, ``_rules_v2``;
``tf.keras.optimizers.legacy``: the ``OptimizerV2`` rules, ``_rules``), plus ``from_optax``.

``SGD``, ``Adam``, ``AdamW``, ``RMSprop``, ``Adagrad``, ``Adadelta``,
``Adamax``, ``Nadam``, ``Ftrl``: Keras' hyperparameter names and defaults and
its update rules (checked against tf_keras in ``tests/parity/test_optimizers.py``).
API: ``apply_gradients(grads_and_vars)``, ``minimize(loss, var_list,
grad_loss=None, name=None, tape=None)``, ``iterations``, ``learning_rate``
(float, ``schedules.*``, or any optax schedule), ``variables()``,
``get_slot``, ``clipnorm`` / ``clipvalue`` / ``global_clipnorm``.  State lives
in Variables, so an optimizer works eagerly (one compiled update per step;
in a loop whose steps repeat, computed inside the gradient's own program from
the third step: ``tapejax.runtime.speculate``) and inside ``tapejax.function``.

Hyperparameters change as in tf_keras: those it keeps in Variables
(``learning_rate``, ``decay``, ``beta_1``/``beta_2``, ``momentum``, ``rho``,
Ftrl's ``learning_rate_power``, ``l1_regularization_strength``,
``l2_regularization_strength``, ``beta``) are float32 Variables here too
(``opt.beta_1 = 0.5`` assigns one; ``opt.beta_1.assign(0.5)`` too), read by
the compiled update at every step, eagerly and inside ``tapejax.function``,
with no recompile, and saved by ``tapejax.train.Checkpoint``; as in TF,
``decay`` is read from the constructor and ``momentum`` is ignored by an SGD or
RMSprop made without it.  Plain attributes (``epsilon``, ``nesterov``,
``clipnorm`` ..., AdamW's betas and ``weight_decay``) take effect at the next
eager step (setting one drops the compiled update, which is compiled again);
a compiled function reads them when it is traced, as ``tf.function`` does.
``amsgrad`` and ``centered`` decide the slots: settable until the first update.
A hyperparameter given as a scalar Variable before the first update is followed
(``SGD(momentum=m)``: ``m.assign(0.0)`` changes the next update, ``opt.momentum is
m``, ``opt.momentum = 0.5`` assigns ``m``); one given as a callable is called at
every update (once per trace inside ``tapejax.function``, as ``tf.function``); a
Tensor is a constant.  SGD and RMSprop decide their momentum slot when made, as
tf_keras: a Variable at 0 then gives none.

Differences from tf_keras, on purpose or forced: ``iterations`` is int32
unless JAX's x64 mode is on (TF: int64); a hyperparameter set to None or to
a string is an error at once (TF stores NaN, or fails at the next update);
results agree with TF to float32 rounding (XLA may fuse ``a * b + c`` into
one rounding, TF's kernels round twice), which the parity tests bound at rtol
2e-6 over six steps (2e-5 for Ftrl and for eight steps with hyperparameters
changed).  The new optimizers (``SGD`` ... here, ``legacy.X`` beside them, ``_rules_v2``)
keep the legacy classes' machinery: their hyperparameters are float32 Variables
(tf_keras': Python floats, ``1 - beta`` rounded in float64: parity at rtol 1e-5), their
slots keep the legacy slot names (``get_slot`` works; tf_keras' new classes have none),
and inside a ``tapejax.function`` the new Nadam is right where TF's gives NaN.  The new
optimizers (and ``AdamW``, ``Lion``, ``Adafactor``) keep tf_keras' moving average of the weights
with ``use_ema=True`` (an ``average`` slot per Variable, overwritten into it every
``ema_overwrite_frequency`` steps, assigned by ``finalize_variable_values``) and take
``exclude_from_weight_decay`` (``_ema``).

``loss_scale``: ``tf.keras.mixed_precision.LossScaleOptimizer`` around these optimizers (dynamic
loss scaling for float16 training; a skipped step is a staged select inside the one update).
"""
from . import legacy, loss_scale, schedules
from ._base import Optimizer
from ._optax import OptaxOptimizer, from_optax
from ._rules import AdamW
from ._rules_new import Adafactor, Lion
from ._rules_v2 import SGD, Adadelta, Adagrad, Adam, Adamax, Ftrl, Nadam, RMSprop
from ._serialization import deserialize, get, serialize

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax", "Nadam",
           "Ftrl", "Lion", "Adafactor", "get", "serialize", "deserialize", "from_optax", "OptaxOptimizer",
           "schedules", "legacy", "loss_scale"]
