"""Helpers the tf.data parity tests share: an element_spec, a dataset's elements and its
cardinality as plain data (the same under TensorFlow and tapejax)."""


def spec(s):
    """An element_spec as plain data: (shape list or None, dtype name) per component."""
    if isinstance(s, dict):
        return {k: spec(v) for k, v in s.items()}
    if isinstance(s, tuple):
        return tuple(spec(v) for v in s)
    shape = s.shape
    if shape is not None and hasattr(shape, "rank"):       # TF's TensorShape
        shape = None if shape.rank is None else shape.as_list()
    return (None if shape is None else list(shape), s.dtype.name)


def L(ds):
    """The elements as Python data (``as_numpy_iterator``, arrays as lists)."""
    return [v.tolist() if hasattr(v, "tolist") else v for v in ds.as_numpy_iterator()]


def card(ds):
    return int(ds.cardinality().numpy())
