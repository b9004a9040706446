"""Keras-2 optimizers (``tf.keras.optimizers.legacy``) on JAX, plus ``from_optax``.

``SGD``, ``Adam``, ``AdamW``, ``RMSprop``, ``Adagrad``, ``Adadelta``,
``Adamax``, ``Nadam``, ``Ftrl``: Keras' hyperparameter names and defaults and
its update rules (checked against tf_keras in ``tests/parity/test_optimizers.py``).
API: ``apply_gradients(grads_and_vars)``, ``minimize(loss, var_list,
grad_loss=None, name=None, tape=None)``, ``iterations``, ``learning_rate``
(float, ``schedules.*``, or any optax schedule), ``variables()``,
``get_slot``, ``clipnorm`` / ``clipvalue`` / ``global_clipnorm``.  State lives
in Variables, so an optimizer works eagerly (one compiled update per step;
in a loop whose steps repeat, computed inside the gradient's own program from
the third step: ``tapejax._speculate``) and inside ``tapejax.function``.

Differences from tf_keras, on purpose or forced: ``iterations`` is int32
unless JAX's x64 mode is on (TF: int64); hyperparameters other than the
learning rate are read when an update is compiled (an eager loop compiles it
at its first step and again when its updates start being predicted, at the
third: change them by making a new optimizer); results agree with TF to
float32 rounding (XLA may fuse ``a * b + c`` into one rounding, TF's kernels
round twice), which the parity tests bound at rtol 2e-6 over six steps (2e-5
for Ftrl).
"""
from . import schedules
from ._base import Optimizer
from ._optax import OptaxOptimizer, from_optax
from ._rules import SGD, Adadelta, Adagrad, Adam, Adamax, AdamW, Ftrl, Nadam, RMSprop

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax", "Nadam",
           "Ftrl", "from_optax", "OptaxOptimizer", "schedules"]
