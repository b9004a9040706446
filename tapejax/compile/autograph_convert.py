"""Converting Python source with diastatic-malt (TF's AutoGraph), for tapejax's operators.

``_Transformer`` is malt's ``PyToPy`` (parse, analyse, the converters of TF's
AutoGraph in TF's order, load the generated module) with one change: the
``ag__`` namespace the generated code calls holds tapejax's operators
(``autograph_ops``) and this module's ``converted_call`` over malt's own.  The
transformer is this module's (its own cache); nothing of malt is patched.

``converted_call`` is AutoGraph's recursive conversion: a function called
from converted code is converted too (methods, lambdas, callable objects,
``functools.partial``), except library code (tapejax, JAX, NumPy, Keras, TF,
the standard library: malt's rules plus tapejax's), functions marked with
``do_not_convert``, ``tapejax.function`` objects (they convert themselves)
and code without source (run as is, with TF's warning).  Builtins that
AutoGraph overloads (``range``, ``len``, ``int``, ``float``, ``abs``) and
``tf.range`` dispatch to ``autograph_ops``.

Errors: an exception raised inside converted code gets TF's message, naming
the user's lines (``in user code: File "...", line N, in f``), and keeps its
class (an ``OpError`` too); a JAX "tracer used as a Python value" error
becomes ``OperatorNotAllowedInGraphError`` first.
"""
from __future__ import annotations

import functools
import inspect
import logging
import os
import threading
import traceback
from typing import Any, Optional, Tuple, cast

from malt.core import ag_ctx, converter
from malt.impl import api as ag_api, conversion
from malt.operators import py_builtins
from malt.pyct import error_utils, inspect_utils, transpiler

from ..core.errors import OperatorNotAllowedInGraphError, OpError
from . import autograph_cache, autograph_ops as ops, tracing

logger = logging.getLogger("tapejax")

#: Modules whose functions are called as they are (library code), besides malt's rules.
LIBRARY_MODULES = ("tapejax", "jax", "jaxlib", "numpy", "optax", "keras", "tf_keras", "tensorflow", "flax",
                   "ml_dtypes", "scipy", "malt", "orbax", "grain", "tensorboardX", "equinox")


class _Transformer(ag_api.PyToPy):
    """malt's source transformer with tapejax's ``ag__`` operators."""

    def get_transformed_name(self, node):
        return "tf__" + super(ag_api.PyToPy, self).get_transformed_name(node)

    def get_extra_locals(self):
        if self._extra_locals is None:
            extra = super().get_extra_locals()
            ns = extra["ag__"].__dict__
            for name in ("if_stmt", "for_stmt", "while_stmt", "if_exp", "and_", "or_", "not_", "eq", "not_eq",
                         "assert_stmt"):
                ns[name] = getattr(ops, name)
            ns["converted_call"] = converted_call
            self._extra_locals = extra
        return self._extra_locals


    def transform_ast(self, node, ctx):
        if getattr(_LOCAL, "storing", False):   # (a conversion to keep on disk: note what it asks)
            rec = autograph_cache.Recording(ctx.info.namespace)
            root = self.get_transformed_name(node)
            rec.asked[root] = "absent" if ctx.info.name == root else "unstorable"
            ctx.info = ctx.info._replace(namespace=rec)
            ctx.namer.global_namespace = rec
            _LOCAL.recording = rec
        return super().transform_ast(node, ctx)

    def transform_function(self, fn, user_context):
        """malt's, with the conversions kept on disk while the compilation cache is on
        (``autograph_cache``)."""
        where = autograph_cache.directory()
        subkey = self.get_caching_key(user_context)
        name = None
        if where is not None and not self._cache.has(fn, subkey):
            name = autograph_cache.key(fn, subkey, tuple(inspect_utils.getfutureimports(fn)))
        if where is None or name is None:
            return super().transform_function(fn, user_context)
        path = os.path.join(where, name + ".json")
        hit = autograph_cache.load(path, inspect_utils.getnamespace(fn))
        if hit is not None:
            module, unbound, source_map = hit
            factory = transpiler._PythonFnFactory("tf__" + fn.__name__, fn.__code__.co_freevars,
                                                  self.get_extra_locals())
            factory._unbound_factory, factory.module, factory.source_map = unbound, module, source_map
            with self._cache_lock:
                if not self._cache.has(fn, subkey):
                    self._cache[fn][subkey] = factory
            return super().transform_function(fn, user_context)
        _LOCAL.storing, _LOCAL.recording = True, None
        try:
            out = super().transform_function(fn, user_context)
        finally:
            _LOCAL.storing = False
        rec, _LOCAL.recording = _LOCAL.recording, None
        if rec is not None and "unstorable" not in rec.asked.values():
            factory = self._cache[fn][subkey]
            autograph_cache.save(path, factory.module, factory.source_map, rec.asked)
        return out


_LOCAL = threading.local()
_TRANSFORMER = _Transformer()


def _options(features=None, user_requested=True, recursive=True) -> converter.ConversionOptions:
    # (malt annotates optional_features as one Feature; it takes None or a tuple of them, as TF's)
    return converter.ConversionOptions(recursive=recursive, user_requested=user_requested,
                                       optional_features=cast(Any, features), internal_convert_user_code=True)


def _transform(entity, options) -> Tuple[Any, Any]:
    """The converted function and its source map (malt's ``transform`` gives three values; its
    annotation says two)."""
    out = cast(Any, _TRANSFORMER.transform(entity, converter.ProgramContext(options=options)))
    return out[0], out[2]


TOPLEVEL = _options()


def is_library(f) -> bool:
    """Library code: called as is by converted code."""
    mod = inspect.getmodule(f) if not isinstance(f, functools.partial) else functools
    name = getattr(mod, "__name__", None)
    if name is None:
        return False
    root = name.split(".")[0]
    return root in LIBRARY_MODULES or root in ("builtins", "functools", "itertools", "operator", "math")


def _is_tapejax_function(f) -> bool:
    """A ``tapejax.function`` (or one bound to an instance): it converts its own body."""
    return getattr(type(f), "_IS_TAPEJAX_FUNCTION", False)


def _call(f, args, kwargs):
    return f(*args, **kwargs) if kwargs is not None else f(*args)


def converted_call(f, args, kwargs, caller_fn_scope=None, options=None):
    """Call ``f`` from converted code, converting it first when it is user code (see the module
    docstring).  The signature is malt's (the generated code calls it)."""
    if options is None:
        if caller_fn_scope is None:
            raise ValueError("either caller_fn_scope or options must have a value")
        options = caller_fn_scope.callopts
    if f is _tf_range():
        return _call(ops.tf_range, args, kwargs)
    if conversion.is_in_allowlist_cache(f, options):
        return _call(f, args, kwargs)
    if ag_ctx.control_status_ctx().status == ag_ctx.Status.DISABLED or ag_api.is_autograph_artifact(f):
        return _call(f, args, kwargs)
    if _is_tapejax_function(f):
        return _call(f, args, kwargs)
    if isinstance(f, functools.partial):
        new_kwargs = dict(f.keywords or {})
        new_kwargs.update(kwargs or {})
        return converted_call(f.func, f.args + tuple(args), new_kwargs, caller_fn_scope, options)
    if inspect_utils.isbuiltin(f):
        return _builtin(f, args, kwargs, caller_fn_scope)
    if conversion.is_unsupported(f) or not options.internal_convert_user_code:
        return _call(f, args, kwargs)
    if not options.user_requested and (is_library(f) or conversion.is_allowlisted(f)):
        conversion.cache_allowlisted(f, options)
        return _call(f, args, kwargs)

    if inspect.ismethod(f) or inspect.isfunction(f):
        target, effective_args = f, tuple(args)
        f_self = getattr(f, "__self__", None)
        if f_self is not None:
            effective_args = (f_self,) + effective_args
    elif hasattr(f, "__class__") and hasattr(f.__class__, "__call__"):
        target, effective_args = f.__class__.__call__, (f,) + tuple(args)
        if is_library(target):
            return _call(f, args, kwargs)
    else:
        return _call(f, args, kwargs)
    code = getattr(target, "__code__", None)
    if code is None or code.co_filename == "<string>":
        return _call(f, args, kwargs)
    try:
        converted_f, source_map = _transform(target, options)
        converted_f.ag_source_map = source_map
    except Exception as e:  # noqa: BLE001 - TF's rule: code it cannot convert runs as is, with a warning
        logger.warning("AutoGraph could not transform %s and will run it as-is.\nCause: %s: %s\nTo silence "
                       "this warning, decorate the function with "
                       "@tapejax.autograph.experimental.do_not_convert", f, type(e).__name__, e)
        conversion.cache_allowlisted(f, options)
        return _call(f, args, kwargs)
    try:
        return _call(converted_f, effective_args, kwargs)
    except Exception as e:
        raise _with_metadata(e, converted_f) from None


def _tf_range():
    from ..ops.array import range as tf_range
    return tf_range


def _builtin(f, args, kwargs, caller_fn_scope):
    if f is eval:
        return py_builtins.eval_in_original_context(f, args, caller_fn_scope)
    if f is super:
        return py_builtins.super_in_original_context(f, args, caller_fn_scope)
    if f is globals:
        return py_builtins.globals_in_original_context(caller_fn_scope)
    if f is locals:
        return py_builtins.locals_in_original_context(caller_fn_scope)
    impl = ops.BUILTINS.get(f)   # (print reaches here only with Feature.BUILTIN_FUNCTIONS)
    if impl is None:
        impl = py_builtins.overload_of(f)
    return impl(*args, **kwargs) if kwargs else impl(*args)


# ---------------------------------------------------------------------------
# Errors that name the user's lines
# ---------------------------------------------------------------------------

def _library_dirs():
    import os

    import jax
    import malt
    import numpy
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # the tapejax package
    dirs = [here] + [os.path.dirname(os.path.abspath(str(m.__file__))) for m in (jax, malt, numpy, os)]
    return tuple(d + os.sep for d in dirs)


_LIBRARY_DIRS = _library_dirs()


class _ErrorMetadata(error_utils.ErrorMetadataBase):
    """malt's error metadata, showing the user's frames only (TF filters its own the same way);
    the rewritten exception keeps its class where it can."""

    def __init__(self, callsite_tb, cause_metadata, cause_message, source_map, converter_filename):
        super().__init__(callsite_tb, cause_metadata, cause_message, source_map, converter_filename)
        frames = tuple(f for f in self.translated_stack
                       if f.is_converted or not str(f.filename).startswith(_LIBRARY_DIRS))
        self.translated_stack = frames or self.translated_stack[-1:]

    def create_exception(self, source_error):
        t = type(source_error)
        msg = self.get_message()
        exc = None
        if issubclass(t, OpError):
            try:
                exc = t(getattr(source_error, "node_def", None), getattr(source_error, "op", None), msg)
            except Exception:  # noqa: BLE001 - a subclass with its own constructor
                exc = None
        else:
            exc = super().create_exception(source_error)
            if exc is None and issubclass(t, error_utils.KNOWN_STRING_CONSTRUCTOR_ERRORS) and \
                    t.__init__ in [c.__init__ for c in error_utils.KNOWN_STRING_CONSTRUCTOR_ERRORS + (Exception,)]:
                exc = t(msg)
        if exc is not None:
            exc = exc.with_traceback(source_error.__traceback__)
        return exc

    def to_exception(self, source_error):
        exc = self.create_exception(source_error)
        if exc is None:   # a class that takes no message: keep it, with the user's lines as a note
            if hasattr(source_error, "add_note"):
                source_error.add_note(self.get_message())
            exc = source_error
        exc.__suppress_context__ = True
        setattr(exc, "ag_error_metadata", self)
        return exc


def _with_metadata(e: BaseException, converted_f) -> BaseException:
    """``e`` (raised inside ``converted_f``) with the user's line added to its message."""
    if getattr(e, "ag_pass_through", False):
        return e
    if tracing.is_value_error(e) and not hasattr(e, "ag_error_metadata"):
        tb = e.__traceback__
        e = OperatorNotAllowedInGraphError(
            "Using a symbolic tensor as a Python value (bool, int, float, an index) is not allowed in a "
            f"tapejax.function ({str(e).splitlines()[0].rstrip('.') if str(e) else type(e).__name__}). AutoGraph "
            "converts `if`, `while`, `for`, `and`/`or`/`not` on tensors; this use is outside them "
            "(in code AutoGraph does not convert, such as a do_not_convert function, or in "
            "`assert`, `bool(x)`, `float(x)`, `x.numpy()`): use tapejax.cond / tapejax.while_loop, "
            "or tapejax ops.").with_traceback(tb)
    if (type(e) is ValueError and "Reverse-mode differentiation does not work for lax.while_loop" in str(e)
            and not hasattr(e, "ag_error_metadata")):
        e = ValueError(
            "A converted `while` loop (or a `for` over tf.range with a traced bound) has no static number of "
            "iterations, and XLA's while loop is not reverse-mode differentiable: make its first statement "
            "`tf.autograph.experimental.set_loop_options(maximum_iterations=N)` (it then runs as a masked "
            "scan of N steps, which the tape differentiates), or iterate over a tensor or a tf.range of "
            f"static length. JAX said: {str(e).splitlines()[0]}").with_traceback(e.__traceback__)
    metadata = getattr(e, "ag_error_metadata", None)
    message = None if metadata is not None else f"{type(e).__name__}: {e}"
    cause_tb = traceback.extract_tb(e.__traceback__)[1:]
    setattr(e, "ag_error_metadata",
            _ErrorMetadata(cause_tb, metadata, message, converted_f.ag_source_map, __file__))
    return e


def converted(fn, features=None):
    """``fn`` as a function that runs its converted code (errors rewritten to name the user's
    lines).  ``features``: ``tapejax.autograph.experimental.Feature`` values."""
    options = TOPLEVEL if features is None else _options(_features(features))

    def run(*args, **kwargs):
        try:
            return converted_call(fn, args, kwargs, options=options)
        except Exception as e:
            meta = getattr(e, "ag_error_metadata", None)
            if meta is None:
                raise
            raise meta.to_exception(e) from None

    return run


def _features(features) -> Optional[tuple]:
    if features is None:
        return None
    return tuple(features) if isinstance(features, (list, tuple)) else (features,)


def to_graph(entity, recursive=True, experimental_optional_features=None):
    options = _options(_features(experimental_optional_features), recursive=recursive)
    if not hasattr(entity, "__code__"):
        raise ag_api.ConversionError(f"converting {entity}: ValueError: Cannot apply autograph to a function "
                                     "that doesn't expose a __code__ object (argument `entity`). If this is a "
                                     "tapejax.function, pass f.python_function instead.")
    try:
        fn, source_map = _transform(entity, options)
    except (ValueError, AttributeError, KeyError, NameError, AssertionError) as e:
        raise ag_api.ConversionError(f"converting {entity}: {type(e).__name__}: {e}") from e
    fn.ag_source_map = source_map
    return ag_api.autograph_artifact(fn)


def to_code(entity, recursive=True, experimental_optional_features=None) -> str:
    import textwrap
    return textwrap.dedent(inspect.getsource(to_graph(entity, recursive, experimental_optional_features)))


__all__ = ["converted", "converted_call", "is_library", "to_code", "to_graph"]
