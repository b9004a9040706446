"""``tapejax.numpy``: the whole ``jax.numpy`` namespace as tape ops, wrapped by a loop.

``import tapejax.numpy as tnp``; ``tnp.anything(x)`` runs ``jnp.anything`` on
the arrays of its arguments (Tensors, Variables, arrays; any pytree of
them) and records one op of type ``"jnp.anything"`` on every tape that
watches an input; its gradient is JAX's.  ``tnp.linalg``, ``tnp.fft``,
``tnp.nn`` (``jax.nn``) and ``tnp.special`` (``jax.scipy.special``) are
wrapped the same way (types ``"jnp.linalg.x"``, ``"jax.nn.x"``,
``"jax.scipy.special.x"``).  Non-array arguments (axes, dtypes, shapes,
flags) are static parameters of the op (see ``tapejax.ops.jax_op``).

``NON_DIFFERENTIABLE`` lists the functions whose outputs are constants to
the tape (gradient ``None``, TF's convention for floor/round/argmax and
data-dependent selections); integer and bool outputs are constants anyway.
``PASSTHROUGH`` lists the functions that return no arrays (dtype and shape
queries, I/O): they are jax.numpy's own.  Classes, dtypes and constants
(``tnp.float32``, ``tnp.pi``) are jax.numpy's.
"""
import types as _types

import jax as _jax
import jax.nn as _jnn
import jax.numpy as _jnp
import jax.scipy.special as _special

from .ops.jax_op import make_op as _make_op

#: Functions whose results carry no gradient (TF: floor, ceil, round give None;
#: data-dependent selections cannot be replayed).
NON_DIFFERENTIABLE = frozenset("""
    floor ceil round round_ rint trunc fix around floor_divide
    zeros_like ones_like empty_like full_like
    argmax argmin argsort lexsort nanargmax nanargmin argwhere nonzero flatnonzero searchsorted digitize
    bincount histogram histogram_bin_edges histogram2d histogramdd
    unique unique_all unique_counts unique_inverse unique_values setdiff1d setxor1d union1d intersect1d
    isin in1d trim_zeros extract compress
    sign signbit heaviside
""".split())

#: Functions that are not array computations: exported unwrapped.
PASSTHROUGH = frozenset("""
    can_cast result_type promote_types issubdtype isdtype isscalar iterable ndim shape size
    save savez load array_repr array_str set_printoptions printoptions get_printoptions
    einsum_path from_dlpack fromfile fromfunction fromiter frombuffer fromstring vectorize frompyfunc
    iscomplexobj isrealobj broadcast_shapes dtype finfo iinfo
""".split())


def _wrap_namespace(src, prefix, target, nondiff=NON_DIFFERENTIABLE):
    names = []
    for name in sorted(dir(src)):
        if name.startswith("_"):
            continue
        obj = getattr(src, name)
        if isinstance(obj, (_types.ModuleType, type)) or not callable(obj) or name in PASSTHROUGH:
            target[name] = obj
            continue
        target[name] = _make_op(obj, f"{prefix}{name}", differentiable=name not in nondiff, jit=False,
                                doc=f"``{prefix}{name}`` recorded on tapes (see ``tapejax.numpy``).\n\n"
                                    + (getattr(obj, "__doc__", None) or ""))
        names.append(name)
    return names


def _submodule(name, src, prefix):
    mod = _types.ModuleType(f"tapejax.numpy.{name}", f"``{prefix}*`` as tape ops (see ``tapejax.numpy``).")
    mod.__dict__["WRAPPED"] = tuple(_wrap_namespace(src, prefix, mod.__dict__))
    return mod


#: The names wrapped as tape ops at the top level.
WRAPPED = tuple(_wrap_namespace(_jnp, "jnp.", globals()))
linalg = _submodule("linalg", _jnp.linalg, "jnp.linalg.")
fft = _submodule("fft", _jnp.fft, "jnp.fft.")
nn = _submodule("nn", _jnn, "jax.nn.")
special = _submodule("special", _special, "jax.scipy.special.")
del _jax
