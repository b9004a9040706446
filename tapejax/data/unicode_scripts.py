"""``tf.strings.unicode_script``: the ICU script code (``UScriptCode``) of each code point.

TF answers with ICU's ``uscript_getScript`` for the Unicode version of the ICU it links (TF 2.21:
Unicode 13).  Neither Python's ``unicodedata`` nor a package on the index gives ICU's numbering
(``fontTools.unicodedata.script`` gives ISO 15924 names, for a newer Unicode, so characters added
since Unicode 13 would differ from TF), so the answer is a table of runs read from TF itself
(``unicode_scripts_table.py``, written by ``tools/gen_unicode_scripts.py``): a code point gets its
run's code, a value outside ``[0, 0x10FFFF]`` -1, an unassigned code point 103 (``Zzzz``), as
TF's.  It is an ordinary recorded op (a ``searchsorted`` over the runs): eager, in dataset
functions and inside ``tapejax.function``.
"""
from typing import Any, Optional

import jax.numpy as jnp
import numpy as np

from ..core import dtypes as _dtypes
from ..core.bind import bind, define
from ..core.convert import convert_to_tensor
from ..core.errors import InvalidArgumentError
from ..core.tensor import Tensor
from .unicode_scripts_table import CODES, STARTS

_STARTS = np.asarray(STARTS, np.int32)
_CODES = np.frombuffer(CODES, np.uint8).astype(np.int32)


def _script(x: Any) -> Any:
    run = jnp.searchsorted(jnp.asarray(_STARTS), x, side="right") - 1
    code = jnp.asarray(_CODES)[jnp.clip(run, 0, len(_CODES) - 1)]
    return jnp.where((x < 0) | (x > 0x10FFFF), jnp.int32(-1), code).astype(jnp.int32)


SCRIPT = define("UnicodeScript", _script, differentiable=False, nondiff_reason="integer output")


def unicode_script(input: Any, name: Optional[str] = None) -> Tensor:  # noqa: A002
    """``tf.strings.unicode_script``: each code point's ICU script code (int32, ``input``'s
    shape); ``input`` must be int32 (another dtype's Tensor: TF's InvalidArgumentError)."""
    if isinstance(input, Tensor):
        t = input
    else:
        try:
            t = convert_to_tensor(input, dtype=_dtypes.int32)
        except (TypeError, ValueError) as e:
            raise TypeError(f"Cannot convert {input!r} to EagerTensor of dtype int32 (argument `input` of "
                            f"tf.strings.unicode_script): {e}") from None
    if t.dtype != _dtypes.int32:
        raise InvalidArgumentError(None, None, f"cannot compute UnicodeScript as input #0(zero-based) was expected to "
                                   f"be a int32 tensor but is a {t.dtype.name} tensor (argument `input`)")
    return bind(SCRIPT, t)


__all__ = ["unicode_script"]
