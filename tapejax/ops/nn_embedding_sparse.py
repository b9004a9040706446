"""``tf.nn.embedding_lookup_sparse`` and ``tf.nn.safe_embedding_lookup_sparse``: the rows of an
embedding table at a SparseTensor's ids, combined per row (``sum``, ``mean``, ``sqrtn``),
optionally weighted: the bag-of-features layer of recommendation and text models.

Built from recorded ops (``embedding_lookup``, a multiply, ``unsorted_segment_sum``), so the
tape differentiates them with respect to the table (and the weights) as TF does.  As TF, the
table is looked up at the *unique* ids (in order of first appearance, ``tf.unique``) and the rows
spread to the entries by a gather, so the table's gradient is an ``IndexedSlices`` with one row
per distinct id (a recommender's optimizer sees each id once).  Inside a trace, where ``unique``'s
size is unknown, the lookup is at every entry's id: the same dense gradient, repeated indices.

* ``embedding_lookup_sparse``: one output row per input row up to the last row holding an id
  (TF's segment reduction: ``max(row) + 1`` rows, rows without ids zero).  Inside a
  ``tapejax.function`` trace, where the ids are not known, the output has ``dense_shape[0]``
  rows (JAX needs a static shape; the rows after the last id are zero).
* ``safe_embedding_lookup_sparse``: ids below zero and weights not above zero are dropped, rows
  left empty give ``default_id``'s embedding (zero without it), and the output has one row per
  row of ``sparse_ids`` of any rank (``dense_shape[:-1] + [dim]``).  Dropping entries depends on
  their values, so it runs on concrete ids (eagerly, in dataset functions), as the sparse ops
  whose size follows the values (``sparse_tensor``).
"""
from typing import Any, Optional

import numpy as np

from ..core import dtypes as _dtypes
from ..core.convert import convert_to_tensor
from .array import concat, ones_like, reshape
from .indexing import gather
from .math import cast, multiply, sqrt
from .nn import embedding_lookup
from .reduce import unsorted_segment_sum, where
from .sorting import unique
from .sparse_tensor import SparseTensor, host_indices, is_traced

_COMBINERS = ("mean", "sqrtn", "sum")


def _combiner(combiner: Optional[str]) -> str:
    c = "mean" if combiner is None else combiner
    if c not in _COMBINERS:
        raise ValueError(f"combiner must be one of 'mean', 'sqrtn' or 'sum', got {combiner}")
    return c


def _check_sparse(sp: Any, arg: str) -> SparseTensor:
    if not isinstance(sp, SparseTensor):
        raise TypeError(f"{arg} must be SparseTensor, got {type(sp)}")
    return sp


def _combine(params: Any, ids: Any, rows: Any, n_rows: int, weights: Any, combiner: str, max_norm: Any) -> Any:
    """Segment-combine the embeddings of ``ids`` into ``n_rows`` rows (``rows``: each id's row)."""
    ids = convert_to_tensor(ids)
    if is_traced(ids):
        emb = embedding_lookup(params, ids, max_norm=max_norm)
    else:  # TF's lookup at the unique ids: the table's IndexedSlices has each id once
        uniq, idx = unique(ids)
        emb = gather(embedding_lookup(params, uniq, max_norm=max_norm), idx)
    if weights is None:
        total = unsorted_segment_sum(emb, rows, n_rows)
        if combiner == "sum":
            return total
        count = unsorted_segment_sum(ones_like(ids, dtype=emb.dtype), rows, n_rows)
        scale = 1.0 / _safe(count if combiner == "mean" else sqrt(count))
        return total * reshape(scale, [-1, 1])
    w = cast(weights, emb.dtype)
    total = unsorted_segment_sum(multiply(emb, reshape(w, [-1, 1])), rows, n_rows)
    if combiner == "sum":
        return total
    denom = unsorted_segment_sum(w, rows, n_rows) if combiner == "mean" else \
        sqrt(unsorted_segment_sum(multiply(w, w), rows, n_rows))
    return total * reshape(_div_no_nan_scale(denom), [-1, 1])


def _safe(x: Any) -> Any:
    """``x`` with zeros replaced by ones (an empty row's sum is zero: it stays zero)."""
    return where(x == 0, 1, x)


def _div_no_nan_scale(denom: Any) -> Any:
    """``1 / denom``, zero where ``denom`` is zero (TF's ``div_no_nan``)."""
    return where(denom == 0, 0, 1.0 / _safe(denom))


def embedding_lookup_sparse(params: Any, sp_ids: Any, sp_weights: Any, combiner: Optional[str] = None,
                            max_norm: Any = None, name: Optional[str] = None, allow_fast_lookup: bool = False) -> Any:
    """``tf.nn.embedding_lookup_sparse`` (see the module docstring)."""
    c = _combiner(combiner)
    sp = _check_sparse(sp_ids, "sp_ids")
    if sp_weights is not None:
        _check_sparse(sp_weights, "sp_weights")
    rows = cast(convert_to_tensor(sp.indices)[:, 0], _dtypes.int32)
    if is_traced(sp.indices):
        n_rows = sp.shape.as_list()[0]
        if n_rows is None:
            raise ValueError("embedding_lookup_sparse inside a tapejax.function needs the SparseTensor's dense "
                             "shape (static), to size its result")
    else:
        idx = host_indices(sp, "embedding_lookup_sparse")
        n_rows = int(idx[:, 0].max()) + 1 if len(idx) else 0
    return _combine(params, sp.values, rows, int(n_rows), None if sp_weights is None else sp_weights.values, c,
                    max_norm)


def safe_embedding_lookup_sparse(embedding_weights: Any, sparse_ids: Any, sparse_weights: Any = None,
                                 combiner: str = "mean", default_id: Any = None, max_norm: Any = None,
                                 name: Optional[str] = None, allow_fast_lookup: bool = False) -> Any:
    """``tf.nn.safe_embedding_lookup_sparse`` (see the module docstring)."""
    c = _combiner(combiner)
    sp = _check_sparse(sparse_ids, "sparse_ids")
    if sparse_weights is not None:
        _check_sparse(sparse_weights, "sparse_weights")
    dims = sp.shape.as_list() if hasattr(sp.shape, "as_list") else list(sp.shape)
    if any(d is None for d in dims):
        raise ValueError("safe_embedding_lookup_sparse needs the SparseTensor's dense shape on the host (a "
                         "dense_shape computed inside tapejax.function is not)")
    shape = [int(d) for d in dims]
    idx = host_indices(sp, "safe_embedding_lookup_sparse")
    ids = np.asarray(convert_to_tensor(sp.values))
    n_rows = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
    flat_rows: np.ndarray = np.zeros(len(idx), np.int64)
    if len(shape) > 1 and len(idx):
        flat_rows = np.asarray(np.ravel_multi_index(tuple(idx[:, :-1].T), shape[:-1]))
    keep = ids >= 0
    wvals = None
    if sparse_weights is not None:
        wvals = np.asarray(convert_to_tensor(sparse_weights.values))
        keep &= wvals > 0
    sel = np.nonzero(keep)[0]
    rows_kept = flat_rows[sel]
    empty = np.ones(n_rows, bool)
    empty[rows_kept] = False
    fill_rows = np.nonzero(empty)[0]
    fill_id = 0 if default_id is None else int(default_id)
    all_rows = np.concatenate([rows_kept, fill_rows]).astype(np.int32)
    # TF's sparse_fill_empty_rows puts each filled entry at its row: the entries in row order
    # (which orders the unique ids, so the indices of the table's IndexedSlices)
    order = np.argsort(all_rows, kind="stable").astype(np.int32)
    all_rows = all_rows[order]
    ids_t = convert_to_tensor(sp.values)
    kept_ids = gather(ids_t, sel.astype(np.int32))
    all_ids = gather(_concat_ids(kept_ids, np.full(len(fill_rows), fill_id, ids.dtype)), order)
    weights = None
    if sparse_weights is not None:
        kept_w = gather(convert_to_tensor(sparse_weights.values), sel.astype(np.int32))
        weights = gather(_concat_ids(kept_w, np.ones(len(fill_rows), wvals.dtype if wvals is not None
                                                     else np.float32)), order)
    out = _combine(embedding_weights, all_ids, all_rows, n_rows, weights, c, max_norm)
    if default_id is None and len(fill_rows):
        mask = np.zeros((n_rows, 1), bool)
        mask[fill_rows] = True
        out = where(convert_to_tensor(mask), 0, out)
    dim = out.shape[-1]
    return reshape(out, list(shape[:-1]) + [dim])


def _concat_ids(a: Any, b: np.ndarray) -> Any:
    if len(b) == 0:
        return a
    return concat([a, convert_to_tensor(b, a.dtype)], 0)


__all__ = ["embedding_lookup_sparse", "safe_embedding_lookup_sparse"]
