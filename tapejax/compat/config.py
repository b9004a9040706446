"""``tapejax.config`` (``tf.config``): run_functions_eagerly / functions_run_eagerly."""
from ..compile.config import functions_run_eagerly, run_functions_eagerly

__all__ = ["functions_run_eagerly", "run_functions_eagerly"]
