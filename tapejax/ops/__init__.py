"""TF-named ops, by family.  Importing this package registers them and installs
the Tensor/Variable operators."""
from . import array, math, nn  # noqa: F401
