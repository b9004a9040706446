"""``tf.nest``'s flatten / pack for the structures the tape API accepts.

Lists, tuples, namedtuples and dicts are containers (dicts flatten in sorted
key order, as TF does); everything else, ``None`` included, is a leaf.  JAX's
``tree_util`` cannot be used here: Tensors are pytrees (so it would descend
into them) and it treats ``None`` as an empty subtree.
"""
from typing import Any, Callable, Iterator, List, Sequence


def _is_namedtuple(x: Any) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


def is_nested(x: Any) -> bool:
    return isinstance(x, (list, tuple, dict))


def _flat_sequence(structure: Any) -> bool:
    """Whether ``structure`` is a plain list or tuple of leaves (the common case: a training
    step's list of variables), which flattens to itself and packs without recursion."""
    t = type(structure)
    if t is not list and t is not tuple:
        return False
    for v in structure:
        if isinstance(v, (list, tuple, dict)):
            return False
    return True


def flatten(structure: Any) -> List[Any]:
    """The leaves of ``structure`` in TF's order."""
    if not isinstance(structure, (list, tuple, dict)):
        return [structure]
    if _flat_sequence(structure):
        return list(structure)
    out = []
    _flatten_into(structure, out)
    return out


def _flatten_into(x: Any, out: List[Any]) -> None:
    if isinstance(x, dict):
        for k in sorted(x):
            _flatten_into(x[k], out)
    elif isinstance(x, (list, tuple)):
        for v in x:
            _flatten_into(v, out)
    else:
        out.append(x)


def pack_sequence_as(structure: Any, flat: Sequence[Any]) -> Any:
    """Rebuild ``structure`` with the leaves taken in order from ``flat``."""
    if _flat_sequence(structure) and len(flat) == len(structure):
        return type(structure)(flat)
    it = iter(flat)
    result = _pack(structure, it)
    return result


def _pack(x: Any, it: Iterator[Any]) -> Any:
    if isinstance(x, dict):
        packed = {k: _pack(x[k], it) for k in sorted(x)}
        return type(x)((k, packed[k]) for k in x) if type(x) is not dict else {k: packed[k] for k in x}
    if _is_namedtuple(x):
        return type(x)(*[_pack(v, it) for v in x])
    if isinstance(x, (list, tuple)):
        return type(x)(_pack(v, it) for v in x)
    return next(it)


def map_structure(fn: Callable[..., Any], *structures: Any, check_types: bool = True,
                  expand_composites: bool = False) -> Any:
    """``tf.nest.map_structure``: ``fn`` applied to the leaves of one structure, or to the
    corresponding leaves of several (same nesting: TF's ValueError / TypeError otherwise), packed
    as the first."""
    if not structures:
        raise ValueError("Must provide at least one structure")
    if len(structures) == 1:
        return pack_sequence_as(structures[0], [fn(v) for v in flatten(structures[0])])
    for other in structures[1:]:
        assert_same_structure(structures[0], other, check_types=check_types)
    return pack_sequence_as(structures[0], [fn(*vs) for vs in zip(*(flatten(s) for s in structures))])


def assert_same_structure(nest1, nest2, check_types=True, expand_composites=False):
    """``tf.nest.assert_same_structure``: ValueError when the nestings differ (TypeError when only the
    sequence types differ, with ``check_types``)."""
    def walk(a, b, path):
        ta, tb = type(a), type(b)
        na, nb = is_nested(a), is_nested(b)
        if na != nb:
            raise ValueError(f"The two structures don't have the same nested structure (at {path or 'the top'}): "
                             f"{nest1!r} and {nest2!r}")
        if not na:
            return
        if check_types and ta is not tb:
            raise TypeError(f"The two structures don't have the same sequence type. Input structure has type {ta}, "
                            f"while shallow structure has type {tb}.")
        if isinstance(a, dict):
            if sorted(a) != sorted(b):
                raise ValueError(f"The two dictionaries don't have the same set of keys: {sorted(a)} and {sorted(b)}")
            for k in sorted(a):
                walk(a[k], b[k], f"{path}[{k!r}]")
            return
        if len(a) != len(b):
            raise ValueError(f"The two structures don't have the same number of elements (at {path or 'the top'}): "
                             f"{len(a)} and {len(b)}")
        for i, (x, y) in enumerate(zip(a, b)):
            walk(x, y, f"{path}[{i}]")

    walk(nest1, nest2, "")
