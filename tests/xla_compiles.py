"""``compiles()``: the names of the programs XLA compiles inside a block, from JAX's own compile
log (``jax.log_compiles``), the oracle of the tests that count compiles."""
import contextlib
import logging

import jax

#: Programs of ``core.transfer`` (a device array from host data, a copy, a fill): compiled once
#: per shape and dtype in a process once that shape is common, whichever test gets there first.
TRANSFERS = frozenset({"jit(_put)", "jit(_copy)", "jit(_full)"})


@contextlib.contextmanager
def compiles():
    """The names (``jit(fn)``) of the programs XLA compiles inside the block, in order."""
    names = []

    class _Catch(logging.Handler):
        def emit(self, record):
            msg = record.getMessage()
            if msg.startswith("Finished XLA compilation of"):
                names.append(msg.split()[4])

    h = _Catch()
    lg = logging.getLogger("jax")
    lg.addHandler(h)
    try:
        with jax.log_compiles(True):
            yield names
    finally:
        lg.removeHandler(h)
