"""TF-named ops, by family.  Importing this package registers them and installs
the Tensor/Variable operators.  ``_grads`` holds TF's gradient conventions,
``jax_op`` turns any JAX function into a tape op."""
from . import array, diagonals, indexing, jax_op, linalg, math, nn, random, reduce  # noqa: F401
