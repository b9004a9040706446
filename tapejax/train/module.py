"""``tapejax.Module`` (``tf.Module``) and ``tapejax.name_scope``.

A Module finds its Variables and submodules by walking its attributes in
sorted attribute-name order, descending into lists, tuples, namedtuples and
dicts (sorted keys), as ``tf.Module._flatten`` does: first the module's own
leaves, then each submodule in the order found, every object once.  So
``model.trainable_variables`` is the same list, in the same order, as in TF,
and can be passed to ``tape.gradient`` and ``optimizer.apply_gradients``.

``name_scope`` prefixes the names of Variables created inside it
(``"dense/w:0"``); a Module's ``name_scope`` is its name under the scope in
which it was constructed.
"""
import re

from ..core import state as _state
from ..core.variable import Variable

_VALID_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

#: ``train.restore.child_added`` while a restore waits for objects that do not exist yet, else
#: None (set by ``restore``, which imports this module): ``Module.__setattr__`` reports each new
#: attribute to it, so a Variable created on a model's first call gets its saved value at once.
#: Called as ``hook(module, name, value)`` after a Module attribute is set (empty unless a
#: restore waits for children that do not exist yet: ``train.restore`` adds its hook then).
CHILD_HOOKS: list = []


class name_scope:
    """``tf.name_scope(name)``: a context manager that prefixes Variable names with ``name/``.

    A name ending in ``/`` is absolute (it replaces the current scope, as TF).
    ``__enter__`` returns the full scope string (``"outer/name/"``).
    """

    def __init__(self, name):
        if name is not None and not isinstance(name, str):
            raise TypeError(f"name_scope expects a string name; got {name!r} of type {type(name).__name__}")
        self._name = name
        self._saved = []

    @property
    def name(self):
        return self._name

    def _full(self):
        cur = _state._local.name_scope
        if not self._name:
            return ""
        if self._name.endswith("/"):
            return self._name
        return f"{cur}{self._name}/"

    def __enter__(self):
        full = self._full()
        self._saved.append(_state._local.name_scope)
        _state._local.name_scope = full
        return full

    def __exit__(self, *exc):
        _state._local.name_scope = self._saved.pop()
        return False


def _camel_to_snake(name):
    s = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s).lower()


def _leaves(x):
    """(leaf) in tf.nest order: lists/tuples/namedtuples in order, dicts by sorted key."""
    if isinstance(x, dict):
        try:
            keys = sorted(x)
        except TypeError:
            keys = list(x)
        for k in keys:
            yield from _leaves(x[k])
    elif isinstance(x, (list, tuple)):
        for v in x:
            yield from _leaves(v)
    else:
        yield x


class Module:
    """Base class for models and layers (``tf.Module``).

    ``variables``, ``trainable_variables``, ``non_trainable_variables`` and
    ``submodules`` are found through the module's attributes (and lists,
    tuples, dicts of them, at any depth), in TF's order, without duplicates.
    ``name_scope`` names the Variables created under it; ``with_name_scope``
    wraps a method in it.
    """

    _TF_MODULE_IGNORED_PROPERTIES = frozenset(("_scope_name",))

    def __init__(self, name=None):
        if name is None:
            name = _camel_to_snake(type(self).__name__)
        elif not isinstance(name, str) or not _VALID_NAME.match(name):
            raise ValueError(f"{name!r} is not a valid module name. Module names must be valid Python "
                             "identifiers (e.g. a valid class name).")
        self._name = name
        with name_scope(name) as scope:
            self._scope_name = scope

    @property
    def name(self):
        return self._name

    def __setattr__(self, name, value):
        object.__setattr__(self, name, value)
        if CHILD_HOOKS:   # a restore waits for children that do not exist yet (``train.restore``)
            for hook in tuple(CHILD_HOOKS):
                hook(self, name, value)

    @property
    def name_scope(self):
        """A ``name_scope`` for this module's full scope (``"outer/module/"``)."""
        return name_scope(self._scope_name)

    @property
    def variables(self):
        """Every Variable of this module and its submodules (a tuple, TF's order)."""
        return tuple(self._flatten(predicate=lambda x: isinstance(x, Variable)))

    @property
    def trainable_variables(self):
        return tuple(self._flatten(predicate=lambda x: isinstance(x, Variable) and x.trainable))

    @property
    def non_trainable_variables(self):
        return tuple(self._flatten(predicate=lambda x: isinstance(x, Variable) and not x.trainable))

    @property
    def submodules(self):
        """Every Module reachable through attributes (breadth of own attributes first, then depth)."""
        return tuple(self._flatten(predicate=lambda x: isinstance(x, Module)))

    def _flatten(self, recursive=True, predicate=None):
        """Yield the leaves of this module's attributes that satisfy ``predicate`` (TF's walk)."""
        predicate = predicate or (lambda x: True)
        seen = {id(self)}
        yield from _flatten_module(self, recursive, predicate, seen, [])

    @classmethod
    def with_name_scope(cls, method):
        """Decorator: run ``method`` inside ``self.name_scope``."""
        import functools

        @functools.wraps(method)
        def wrapped(self, *args, **kwargs):
            with self.name_scope:
                return method(self, *args, **kwargs)
        return wrapped

    def __repr__(self):
        return f"<{type(self).__module__}.{type(self).__name__} name={self._name!r}>"


def _flatten_module(module, recursive, predicate, seen, stack):
    if id(module) in stack:
        recursive = False
    submodules = []
    attrs = vars(module)
    for key in sorted(attrs):
        if key in Module._TF_MODULE_IGNORED_PROPERTIES or key == "_name":
            continue
        for leaf in _leaves(attrs[key]):
            if id(leaf) in seen:
                continue
            seen.add(id(leaf))
            if predicate(leaf):
                yield leaf
            if recursive and isinstance(leaf, Module):
                submodules.append(leaf)
    stack.append(id(module))
    for sub in submodules:
        yield from _flatten_module(sub, recursive, predicate, seen, stack)
    stack.pop()
