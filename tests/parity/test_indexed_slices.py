"""IndexedSlices (TF_SEMANTICS.md item 15): which gradients TF gives as ``tf.IndexedSlices`` and
which it densifies, the class's behaviour, and Keras-2 optimizers applying them as sparse updates
(tf_keras' ``_resource_apply_sparse`` rules).  A gradient is returned as ``_desc``: its kind and,
for slices, the values, indices and dense shape as they are (not densified), so the kind, the
row order and the duplicates are compared, not only the dense value."""

import numpy as np

from .harness import parity, raises

LEG = "keras.optimizers.legacy"
RT = dict(rtol=2e-6, atol=1e-7)   # float32 rounding
RT_FTRL = dict(rtol=2e-5, atol=1e-6)


def _desc(g):
    kind = type(g).__name__
    if kind == "IndexedSlices":
        return {"kind": kind, "values": g.values, "indices": g.indices, "dense_shape": g.dense_shape}
    return {"kind": "None" if g is None else "Tensor", "value": g}


def _table(tf):
    return tf.Variable([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], name="table")


# -- which gradients are IndexedSlices -----------------------------------------------------

@parity(modes=True)
def test_gather_of_variable_is_indexed_slices(tf):
    """tf.gather / embedding_lookup of a Variable: IndexedSlices (repeated rows kept)."""
    v = _table(tf)
    idx = tf.constant([2, 0, 2])
    with tf.GradientTape(persistent=True) as t:
        y = tf.reduce_sum(tf.gather(v, idx) * tf.constant([[1.0, 2.0]]))
        z = tf.reduce_sum(tf.nn.embedding_lookup(v, idx) ** 2)
        w = tf.reduce_sum(tf.gather(v, idx, axis=0))
    return _desc(t.gradient(y, v)), _desc(t.gradient(z, v)), _desc(t.gradient(w, v))


@parity(modes=True)
def test_gather_of_watched_tensor_and_of_reads(tf):
    """A watched tensor's gather, and a gather of v.read_value() / tf.identity(v): IndexedSlices."""
    x = tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    v = _table(tf)
    idx = tf.constant([1, 1, 0])
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        a = tf.reduce_sum(tf.gather(x, idx))
        b = tf.reduce_sum(tf.gather(v.read_value(), idx) * 3.0)
        c = tf.reduce_sum(tf.gather(tf.identity(v), idx))
    return _desc(t.gradient(a, x)), _desc(t.gradient(b, v)), _desc(t.gradient(c, v))


@parity(modes=True)
def test_gradients_that_densify(tf):
    """A dense use of the params too, a gather of v*1, slicing, axis 1, a list target with a dense
    term: dense Tensors (TF sums an IndexedSlices with a dense gradient densely)."""
    v = _table(tf)
    idx = tf.constant([2, 0, 2])
    with tf.GradientTape(persistent=True) as t:
        mixed = tf.reduce_sum(tf.gather(v, idx)) + tf.reduce_sum(v * v)
        scaled = tf.reduce_sum(tf.gather(v * 1.0, idx))
        row = tf.reduce_sum(v[1])
        rows = tf.reduce_sum(v[0:2])
        axis1 = tf.reduce_sum(tf.gather(v, [1, 0], axis=1))
        y = tf.reduce_sum(tf.gather(v, idx))
        z = tf.reduce_sum(v)
    return [_desc(t.gradient(e, v)) for e in (mixed, scaled, row, rows, axis1)] + [_desc(t.gradient([y, z], v))]


@parity(modes=True)
def test_several_gathers_concatenate(tf):
    """Gradients of several gathers of one Variable: values and indices concatenated in tape order;
    a product of two gathers; 2-D and scalar indices (flattened)."""
    v = _table(tf)
    idx = tf.constant([2, 0, 2])
    with tf.GradientTape(persistent=True) as t:
        two = tf.reduce_sum(tf.gather(v, idx)) + 2.0 * tf.reduce_sum(tf.gather(v, [1]))
        three = tf.reduce_sum(tf.gather(v, [0])) + tf.reduce_sum(tf.gather(v, [1, 2])) + tf.reduce_sum(tf.gather(v, [2]))
        prod = tf.reduce_sum(tf.gather(v, idx) * tf.gather(v, idx))
        two_d = tf.reduce_sum(tf.gather(v, [[0, 1], [2, 2]]) * 2.0)
        scalar = tf.reduce_sum(tf.gather(v, 1))
    return [_desc(t.gradient(e, v)) for e in (two, three, prod, two_d, scalar)]


@parity(modes=True)
def test_unconnected_and_output_gradients(tf):
    """unconnected_gradients='zero' leaves the gather's gradient sparse and gives zeros elsewhere;
    output_gradients become the values; the gather's output as a source is its dense cotangent."""
    v = _table(tf)
    u = tf.Variable([1.0, 2.0])
    idx = tf.constant([2, 0, 2])
    with tf.GradientTape(persistent=True) as t:
        e = tf.gather(v, idx)
        y = tf.reduce_sum(e * e)
    zero = t.gradient(y, [v, u], unconnected_gradients="zero")
    none = t.gradient(y, [v, u])
    given = t.gradient(e, v, output_gradients=tf.ones([3, 2]) * 2.0)
    both = t.gradient(y, [v, e])
    return [_desc(g) for g in zero + none] + [_desc(given)] + [_desc(g) for g in both]


@parity(modes=True)
def test_nested_tapes_and_jacobian(tf):
    """The inner gradient under a recording outer tape is IndexedSlices and so is the outer one;
    a jacobian is dense."""
    v = _table(tf)
    idx = tf.constant([2, 0, 2])
    with tf.GradientTape() as t2:
        with tf.GradientTape() as t1:
            y = tf.reduce_sum(tf.gather(v, idx) ** 2)
        g = t1.gradient(y, v)
        s = tf.reduce_sum(tf.convert_to_tensor(g))
    outer = t2.gradient(s, v)
    with tf.GradientTape() as t:
        e = tf.gather(v, idx)
    jac = t.jacobian(e, v)
    return _desc(g), _desc(outer), _desc(jac)


@parity(needs="function")
def test_in_function_and_tf_gradients(tf):
    """Inside tf.function: the tape's gradient and tf.gradients are IndexedSlices (returned from
    the function as such); tf.gradients of a mixed sum is dense."""
    v = _table(tf)
    idx = tf.constant([2, 0, 2])

    @tf.function
    def tape_grad():
        with tf.GradientTape() as t:
            y = tf.reduce_sum(tf.gather(v, idx))
        return t.gradient(y, v)

    @tf.function
    def graph_grads():
        y = tf.reduce_sum(tf.gather(v, idx)) + tf.reduce_sum(tf.gather(v, [0]))
        z = tf.reduce_sum(tf.gather(v, idx)) + tf.reduce_sum(v)
        return tf.gradients(y, v)[0], tf.gradients(z, v)[0]

    a, b = graph_grads()
    return _desc(tape_grad()), _desc(a), _desc(b)


@parity(modes=True, needs="function")
def test_gather_under_function_then_eager(tf):
    """A compiled step's embedding gradient, summed over a batch loop, equals the eager one."""
    v = _table(tf)

    @tf.function
    def g(i):
        with tf.GradientTape() as t:
            y = tf.reduce_sum(tf.nn.embedding_lookup(v, i) ** 2)
        return tf.convert_to_tensor(t.gradient(y, v))

    return g(tf.constant([0, 0, 1])), g(tf.constant([2, 1, 2]))


# -- the class ------------------------------------------------------------------------

@parity
def test_class_attributes_and_conversion(tf):
    """values / indices / dense_shape / dtype / shape, -g, convert_to_tensor (rows summed, an index
    past the end dropped... by TF only on GPU: here negative), tf ops densify, Python operators do not exist."""
    g = tf.IndexedSlices(tf.constant([[1.0, 2.0], [3.0, 4.0]]), tf.constant([2, 0]), tf.constant([3, 2]))
    dup = tf.IndexedSlices(tf.ones([3, 2]), tf.constant([0, 0, 2]), tf.constant([3, 2]))
    neg = -g
    return {
        "values": g.values, "indices": g.indices, "dense_shape": g.dense_shape,
        "dtype": g.dtype.name, "shape": g.shape.as_list(), "neg": _desc(neg),
        "dense": tf.convert_to_tensor(g), "dup": tf.convert_to_tensor(dup),
        "multiply": tf.multiply(g, 2.0), "add": tf.add(g, g), "square": tf.math.square(g),
        "reduce_sum": tf.reduce_sum(g), "reshape": tf.reshape(g, [-1]), "add_n": tf.math.add_n([g, g]),
        "add_n_mixed": tf.add_n([g, tf.ones([3, 2])]), "concat": tf.concat([g, g], 0), "shape_op": tf.shape(g),
        "is_tensor": tf.is_tensor(g) if hasattr(tf, "is_tensor") else True,
        "mul": raises(lambda: g * 2), "rmul": raises(lambda: 2 * g), "plus": raises(lambda: g + g),
        "len": raises(len, g), "numpy": raises(lambda: g.numpy()), "consumers": len(g.consumers()),
        "no_shape": raises(tf.convert_to_tensor, tf.IndexedSlices(tf.constant([[1.0, 2.0]]), tf.constant([0]))),
        "bad_dtype": raises(tf.convert_to_tensor, g, dtype=tf.int32),
        "name": raises(lambda: g.name), "op": raises(lambda: g.op),
    }


@parity
def test_ops_that_keep_slices(tf):
    """identity, cast, clip_by_value, clip_by_norm and clip_by_global_norm keep IndexedSlices (the
    norms over the values); global_norm reads the values."""
    g = tf.IndexedSlices(tf.constant([[1.0, 2.0], [3.0, 4.0]]), tf.constant([2, 0]), tf.constant([3, 2]))
    clipped, norm = tf.clip_by_global_norm([g, tf.constant([3.0, 4.0]), None], 1.0)
    return {"identity": _desc(tf.identity(g)), "cast": _desc(tf.cast(g, tf.float16)),
            "clip_value": _desc(tf.clip_by_value(g, 0.0, 2.5)), "clip_norm": _desc(tf.clip_by_norm(g, 1.0)),
            "global": [_desc(c) for c in clipped[:2]], "none": clipped[2], "norm": norm,
            "global_norm": tf.linalg.global_norm([g, tf.constant([1.0]), None]),
            "nest": len(tf.nest.flatten([g, g]))}


# -- sparse updates: tf_keras' _resource_apply_sparse --------------------------------------

_IDS = [[1, 3, 3, 6], [0, 1, 7, 7], [2, 2, 2, 5], [6, 1, 3, 0], [4, 4, 1, 2]]


def _embed_train(tf, opt, steps=5, constraint=None):
    """An embedding table (sparse gradients, repeated ids) and a dense projection, one optimizer."""
    table = tf.Variable(np.arange(24, dtype=np.float32).reshape(8, 3) / 10.0 - 1.0, name="table",
                        constraint=constraint)
    w = tf.Variable([[0.5], [-1.0], [0.25]], name="w")
    kinds = []
    for s in range(steps):
        with tf.GradientTape() as t:
            e = tf.nn.embedding_lookup(table, tf.constant(_IDS[s % len(_IDS)]))
            loss = tf.reduce_mean(tf.square(tf.matmul(e, w) - 1.0))
        grads = t.gradient(loss, [table, w])
        kinds.append(type(grads[0]).__name__)
        opt.apply_gradients(zip(grads, [table, w]))
    return {"table": table, "w": w, "kinds": kinds, "iterations": int(opt.iterations.numpy()),
            "slots": [v.numpy() for v in opt.variables()[1:]]}


def _opt(tf, name, **kw):
    return getattr(tf.keras.optimizers.legacy, name)(**kw)


@parity(modes=True, needs=f"{LEG}.SGD", **RT)
def test_sparse_sgd(tf):
    """Plain SGD: ResourceScatterAdd(-lr * g) (duplicates add); with (Nesterov) momentum TF's sparse
    kernel on the deduplicated rows: untouched rows keep their velocity."""
    return (_embed_train(tf, _opt(tf, "SGD", learning_rate=0.1)),
            _embed_train(tf, _opt(tf, "SGD", learning_rate=0.05, momentum=0.9)),
            _embed_train(tf, _opt(tf, "SGD", learning_rate=0.05, momentum=0.8, nesterov=True)))


@parity(modes=True, needs=f"{LEG}.Adam", **RT)
def test_sparse_adam(tf):
    """Keras-2 sparse Adam decays m and v over the whole table, then adds the rows' terms."""
    return (_embed_train(tf, _opt(tf, "Adam", learning_rate=0.05)),
            _embed_train(tf, _opt(tf, "Adam", learning_rate=0.05, epsilon=0.5, amsgrad=True)))


@parity(modes=True, needs=f"{LEG}.RMSprop", **RT)
def test_sparse_rmsprop(tf):
    return (_embed_train(tf, _opt(tf, "RMSprop", learning_rate=0.01)),
            _embed_train(tf, _opt(tf, "RMSprop", learning_rate=0.01, centered=True, epsilon=0.1)),
            _embed_train(tf, _opt(tf, "RMSprop", learning_rate=0.01, momentum=0.5)),
            _embed_train(tf, _opt(tf, "RMSprop", learning_rate=0.01, momentum=0.5, centered=True)))


@parity(modes=True, needs=f"{LEG}.Adagrad", **RT)
def test_sparse_adagrad_adadelta_adamax_nadam(tf):
    return (_embed_train(tf, _opt(tf, "Adagrad", learning_rate=0.1, initial_accumulator_value=0.2)),
            _embed_train(tf, _opt(tf, "Adadelta", learning_rate=1.0)),
            _embed_train(tf, _opt(tf, "Adamax", learning_rate=0.05)),
            _embed_train(tf, _opt(tf, "Nadam", learning_rate=0.05)))


@parity(modes=True, needs=f"{LEG}.Ftrl", **RT_FTRL)
def test_sparse_ftrl(tf):
    return (_embed_train(tf, _opt(tf, "Ftrl", learning_rate=0.2, l1_regularization_strength=0.01,
                                  l2_regularization_strength=0.02, beta=0.1)),
            _embed_train(tf, _opt(tf, "Ftrl", learning_rate=0.2, learning_rate_power=-0.7,
                                  l2_shrinkage_regularization_strength=0.05)))


@parity(modes=True, needs="keras.optimizers.AdamW", **RT)
def test_sparse_adamw(tf):
    r = _embed_train(tf, tf.keras.optimizers.AdamW(learning_rate=0.05, weight_decay=0.1))
    r.pop("slots")   # Keras 2's AdamW orders its slots per variable
    return r


@parity(modes=True, needs=f"{LEG}.SGD", **RT)
def test_sparse_clipping(tf):
    """clipvalue / clipnorm / global_clipnorm clip a sparse gradient by its values."""
    return (_embed_train(tf, _opt(tf, "SGD", learning_rate=0.1, clipnorm=0.3)),
            _embed_train(tf, _opt(tf, "SGD", learning_rate=0.1, clipvalue=0.05)),
            _embed_train(tf, _opt(tf, "Adam", learning_rate=0.1, global_clipnorm=0.4)))


@parity(needs=f"{LEG}.SGD")
def test_sparse_update_errors(tf):
    """A constraint on a Variable with a sparse gradient is a RuntimeError (TF), before any change."""
    table = tf.Variable(np.ones((4, 2), np.float32), constraint=lambda x: x)
    opt = _opt(tf, "SGD", learning_rate=0.1)
    g = tf.IndexedSlices(tf.ones([2, 2]), tf.constant([0, 3]), tf.constant([4, 2]))
    return raises(opt.apply_gradients, [(g, table)]), table


@parity(modes=True, needs=["function", f"{LEG}.Adam"], **RT)
def test_sparse_compiled_step(tf):
    """The embedding step under tf.function (slots made on the first call), Adam and SGD."""
    out = []
    for opt in (_opt(tf, "Adam", learning_rate=0.05), _opt(tf, "SGD", learning_rate=0.1, momentum=0.5)):
        table = tf.Variable(np.arange(24, dtype=np.float32).reshape(8, 3) / 10.0 - 1.0)
        w = tf.Variable([[0.5], [-1.0], [0.25]])

        @tf.function
        def step(ids):
            with tf.GradientTape() as t:
                loss = tf.reduce_mean(tf.square(tf.matmul(tf.gather(table, ids), w) - 1.0))
            opt.apply_gradients(zip(t.gradient(loss, [table, w]), [table, w]))
            return loss

        losses = [step(tf.constant(ids)) for ids in _IDS]
        out.append((losses[-1], table, w))
    return out
