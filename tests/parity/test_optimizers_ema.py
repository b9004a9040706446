"""tf_keras' new optimizers with ``use_ema`` (``tapejax/optimizers/_ema.py``): the moving average of the
weights, its overwrite every ``ema_overwrite_frequency`` steps, ``finalize_variable_values``,
``exclude_from_weight_decay``; eagerly, inside a compiled step, and across a checkpoint."""
from .harness import parity, raises

RT = dict(rtol=2e-5, atol=5e-6)   # float32 rounding over seven steps (XLA fuses a*b+c; tf_keras rounds 1 - beta in float64)


def _vars(tf):
    return (tf.Variable([[0.5, -1.0], [2.0, 0.25]], name="kernel"), tf.Variable([0.1, -0.2], name="bias"))


def _step_fn(tf, opt, w, b):
    x = tf.constant([[1.0, 2.0], [3.0, -1.0], [0.5, 0.5]])

    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b - 1.0))
        opt.apply_gradients(zip(tape.gradient(loss, [w, b]), [w, b]))
        return loss
    return step


def _variables(opt):
    v = opt.variables
    return list(v() if callable(v) else v)


def _train(tf, opt, steps=7, compiled=False, exclude=None):
    w, b = _vars(tf)
    if exclude is not None:
        opt.exclude_from_weight_decay(var_names=exclude)
    step = _step_fn(tf, opt, w, b)
    if compiled:
        step = tf.function(step)
    out = []
    for _ in range(steps):
        out.append((step(), w.numpy(), b.numpy()))
    averages = [v.numpy() for v in _variables(opt)[1:3]]   # (iterations, then the averages: tf_keras' order)
    opt.finalize_variable_values([w, b])
    return {"steps": out, "averages": averages, "final": (w, b), "iterations": int(opt.iterations.numpy())}


_OPTS = {
    "sgd-momentum": lambda ko, f: ko.SGD(0.05, momentum=0.9, use_ema=True, ema_momentum=0.7, ema_overwrite_frequency=f),
    "adam-decay": lambda ko, f: ko.Adam(0.05, weight_decay=0.05, use_ema=True, ema_momentum=0.9,
                                        ema_overwrite_frequency=f),
    "adamw": lambda ko, f: ko.AdamW(0.05, weight_decay=0.1, use_ema=True, ema_momentum=0.5, ema_overwrite_frequency=f),
    "rmsprop": lambda ko, f: ko.RMSprop(0.01, momentum=0.5, use_ema=True, ema_momentum=0.8, ema_overwrite_frequency=f),
    "adagrad": lambda ko, f: ko.Adagrad(0.1, use_ema=True, ema_momentum=0.6, ema_overwrite_frequency=f),
    "lion": lambda ko, f: ko.Lion(0.01, use_ema=True, ema_momentum=0.6, ema_overwrite_frequency=f),
}


def _case(name, freq, compiled):
    def case(tf):
        exclude = ["bias"] if name in ("adam-decay", "adamw") else None
        return _train(tf, _OPTS[name](tf.keras.optimizers, freq), compiled=compiled, exclude=exclude)
    case.__name__ = case.__qualname__ = f"test_ema_{name.replace('-', '_')}_every_{freq}_{'compiled' if compiled else 'eager'}"
    case.__doc__ = (f"{name}: seven steps with use_ema (overwrite frequency {freq}), "
                    f"{'inside tf.function' if compiled else 'eagerly'}; the averages, then finalize_variable_values.")
    return case


for _name in _OPTS:
    for _freq in (None, 3):
        _c = _case(_name, _freq, False)
        globals()[_c.__name__] = parity(**RT)(_c)
for _name in ("sgd-momentum", "adamw", "rmsprop"):
    for _freq in (None, 2):
        _c = _case(_name, _freq, True)
        globals()[_c.__name__] = parity(**RT)(_c)


@parity(**RT)
def test_ema_survives_a_checkpoint(tf):
    """Four steps, a checkpoint, four more steps of a new optimizer restored from it: the same
    averages (restored with the other slots) and weights as eight steps without the checkpoint."""
    import tempfile
    ko = tf.keras.optimizers

    def make():
        w, b = _vars(tf)
        opt = ko.AdamW(0.05, weight_decay=0.1, use_ema=True, ema_momentum=0.5, ema_overwrite_frequency=3)
        return w, b, opt, _step_fn(tf, opt, w, b)

    w, b, opt, step = make()
    for _ in range(8):
        step()
    want = [w.numpy(), b.numpy()] + [v.numpy() for v in _variables(opt)[1:3]]

    w, b, opt, step = make()
    for _ in range(4):
        step()
    path = tf.train.Checkpoint(w=w, b=b, opt=opt).save(tempfile.mkdtemp() + "/ck")
    w2, b2, opt2, step2 = make()
    tf.train.Checkpoint(w=w2, b=b2, opt=opt2).restore(path)
    for _ in range(4):
        step2()
    got = [w2.numpy(), b2.numpy()] + [v.numpy() for v in _variables(opt2)[1:3]]
    return want, got, int(opt2.iterations.numpy())


@parity
def test_ema_argument_errors(tf):
    """tf_keras' checks of the EMA arguments (ValueError), made only with use_ema; exclusion after
    the first update is a ValueError; finalize of a Variable the optimizer never updated, a KeyError."""
    ko = tf.keras.optimizers
    out = [raises(ko.Adam, use_ema=True, ema_momentum=1.5), raises(ko.SGD, use_ema=True, ema_overwrite_frequency=2.0),
           raises(ko.AdamW, use_ema=True, ema_overwrite_frequency=-1), raises(ko.Lion, use_ema=True, ema_momentum=-0.1),
           type(ko.Adam(use_ema=False, ema_momentum=1.5)).__name__]
    opt = ko.SGD(0.1, use_ema=True)
    w, b = _vars(tf)
    before = raises(opt.finalize_variable_values, [w])   # (no update yet: no averages)
    _step_fn(tf, opt, w, b)()
    out.append(before)
    out.append(raises(opt.finalize_variable_values, [tf.Variable([1.0])]))
    out.append(raises(opt.exclude_from_weight_decay, var_names=["bias"]))
    out.append(ko.SGD(0.1).finalize_variable_values([w]))   # (no use_ema: nothing to do)
    cfg = opt.get_config()
    out.append({k: cfg[k] for k in ("use_ema", "ema_momentum", "ema_overwrite_frequency")})
    return out
