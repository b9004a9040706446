"""Random training loops as *data*, rendered as TF2 scripts, run under tapejax and TensorFlow.

A ``TrainProgram`` (drawn from an integer seed by ``generate``) describes a small
training loop: 2-4 Variables of small shapes in a linear / sigmoid / tanh-MLP
model, manual updates (``v.assign_sub(lr * g)``) or a Keras-2 optimizer (SGD with
and without momentum, Adam, RMSprop, Adagrad), learning-rate schedules, gradient
masks and clipping (``clip_by_norm`` / ``clip_by_global_norm``), a Variable
whose loss term exists only on even steps (``None`` gradients), Variables
updated only some steps, ``assign`` between steps, Python reads of values and a
Python branch on ``float(loss)``, metrics kept as tensors or read as floats, a
persistent tape with a second gradient, a nested tape (gradient penalty),
``copy.deepcopy`` of a Variable (a DQN-style target) and ``copy.copy`` of a
Tensor, a ``custom_gradient`` reading changing Python state, a NumPy batch
buffer refilled every step, an evaluation ``tf.function`` and a compiled train
step called between eager steps.

The description renders itself as Python source (``TrainProgram.source()``):
a function ``main(tf, keras, probe)`` written against TF's API.  That source
*is* what runs (``run``: ``exec`` with ``tf = tapejax, keras = tapejax.keras``,
or ``tf = tensorflow, keras = tf_keras``), so a failing program's source is its
exact, standalone reproduction (it ends with a ``__main__`` block that prints
tapejax's results with deferral on and off, and TF's).

``check(prog)`` runs the program under tapejax in every execution mode
(``MODES``: deferral and speculation each on and off) and under TensorFlow
(when it imports), and compares every returned value (losses, gradients with
their ``None``-ness, aux gradients, metrics, evaluations, branch decisions,
Variable peeks, final Variables) against the reference (TF, else tapejax with
deferral off), with ``RTOL``/``ATOL``.  Memory: at the ends of steps
``steps-5`` and ``steps-1`` (every one-off feature happens before) the probe
counts ``jax.live_arrays()`` and the tensors the program keeps in its result
lists; with deferral off the live arrays may grow only by the kept tensors (and the
host copy JAX keeps of a kept loss that ``float()`` read), with deferral on
by ``len(vars) + 4`` arrays per kept tensor (an unread pending value may
keep its own inputs alive, the Variable values it read included).

``shrink(prog, fails)`` turns features off one at a time while the failure
persists, which gives the small programs quoted in tests/test_train_fuzz.py.
Features of known, being-fixed bugs can be switched off by name
(``TAPEJAX_TRAIN_FUZZ_OFF=copy,custom,host_buffer``); they default on.
"""
from __future__ import annotations

import contextlib
import dataclasses
import gc
import linecache
import logging
import os
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

RTOL, ATOL = 2e-4, 2e-5
F32 = np.float32

OPTIMIZERS = ("manual", "SGD", "SGD_momentum", "Adam", "RMSprop", "Adagrad")
SCHEDULES = (None, "exponential", "piecewise", "cosine")
ARCHS = ("linear", "sigmoid", "mlp")
# features that exercise bugs being fixed in issue #20 (they default on)
GATED = ("copy", "custom", "host_buffer")


def _arr(a: np.ndarray) -> str:
    a = np.asarray(a)
    return f"np.array({np.round(a.astype(np.float64), 4).tolist()!r}, np.float32)"


@dataclasses.dataclass
class VarInit:
    name: str
    value: np.ndarray

    def __repr__(self) -> str:
        return f"VarInit({self.name!r}, {_arr(self.value)})"


@dataclasses.dataclass
class TrainProgram:
    """One training loop. Step-indexed one-off features (``assign_at``, ``compiled_at``,
    ``eval_at``) happen before step ``steps - 5``, so the last 4 steps are alike (memory)."""
    seed: int
    arch: str
    xs: tuple            # two batches (n, d), used alternately
    y: np.ndarray        # (n, 1)
    vars: list           # VarInit; the model's Variables first, then 'u' if ``sometimes_unused``
    steps: int = 7
    optimizer: str = "manual"
    lr: float = 0.1
    schedule: str | None = None
    clip: str | None = None          # None | 'norm' | 'global'
    clip_value: float = 1.0
    masks: dict = dataclasses.field(default_factory=dict)         # var index -> 0/1 array
    update_every: dict = dataclasses.field(default_factory=dict)  # var index -> period
    sometimes_unused: bool = False   # Variable 'u' in the loss only on even steps
    assign_at: tuple | None = None   # (step, var index, 'scale' | 'add')
    branch: float | None = None      # if float(loss) > c: ... else: halve the gradients
    metric: str | None = None        # None | 'kept' (mae tensor) | 'read' (float) | 'logits' (the
    #                                  prediction, kept) | 'sum' (a running sum tot = tot + loss)
    keep_losses: str = "tensor"      # 'tensor' | 'float'
    peek: bool = False               # read a Variable's value with .numpy() every step
    persistent: bool = False         # a second gradient (metric wrt var 0) on a persistent tape
    nested: bool = False             # gradient penalty through a nested tape
    copy_var: bool = False           # target = copy.deepcopy(var 0), refreshed every 2 steps
    copy_tensor: str | None = None   # None | 'copy' | 'deepcopy' of the prediction
    custom: bool = False             # custom_gradient reading changing Python state
    host_buffer: bool = False        # the batch is a NumPy buffer refilled every step
    eval_at: tuple = ()              # steps after which a tf.function evaluation runs
    compiled_at: tuple = ()          # steps run by a tf.function train step
    compiled_model: bool = False     # the eager steps call the model through a tf.function

    # ---- rendering ---------------------------------------------------------------------

    def __repr__(self) -> str:
        fields = []
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name == "xs":
                r = "(" + ", ".join(_arr(a) for a in v) + ",)"
            elif f.name == "y":
                r = _arr(v)
            elif f.name == "masks":
                r = "{" + ", ".join(f"{k}: {_arr(m)}" for k, m in v.items()) + "}"
            else:
                r = repr(v)
            fields.append(f"    {f.name}={r},")
        return "TrainProgram(\n" + "\n".join(fields) + "\n)"

    def source(self) -> str:
        """The loop as a standalone TF2 script (``main(tf, keras, probe)``)."""
        return _render(self)

    @property
    def names(self) -> list:
        return [v.name for v in self.vars]

    def features(self) -> list:
        """The names of the features this program uses (for reports)."""
        out = [self.arch, self.optimizer]
        for name in ("schedule", "clip", "assign_at", "branch", "metric", "copy_tensor"):
            if getattr(self, name) is not None:
                out.append(f"{name}={getattr(self, name)}")
        for name in ("sometimes_unused", "peek", "persistent", "nested", "copy_var", "custom", "host_buffer",
                     "compiled_model"):
            if getattr(self, name):
                out.append(name)
        if self.masks:
            out.append("masks")
        if self.update_every:
            out.append("update_every")
        if self.eval_at:
            out.append("eval_fn")
        if self.compiled_at:
            out.append("compiled_step")
        if self.keep_losses == "tensor":
            out.append("kept_losses")
        return out


# --------------------------------------------------------------------------
# Generation
# --------------------------------------------------------------------------

def gated_off() -> set:
    """Features switched off by ``TAPEJAX_TRAIN_FUZZ_OFF`` (comma-separated names of ``GATED``)."""
    raw = os.environ.get("TAPEJAX_TRAIN_FUZZ_OFF", "")
    return {s.strip() for s in raw.split(",") if s.strip()}


def generate(seed: int, off: set | None = None) -> TrainProgram:
    """A random program from ``seed`` (deterministic); ``off`` names ``GATED`` features not to draw."""
    off = gated_off() if off is None else set(off)
    rng = np.random.default_rng(seed)
    coin = lambda p: bool(rng.random() < p)
    # few distinct shapes, so that programs share tapejax's per-shape compiled code (CI time)
    n, d, h = 4, int(rng.integers(2, 4)), 3
    xs = tuple(rng.uniform(-1, 1, (n, d)).astype(F32) for _ in range(2))
    y = rng.uniform(-1, 1, (n, 1)).astype(F32)
    arch = ARCHS[int(rng.integers(len(ARCHS)))]
    u = lambda *s: rng.uniform(-0.8, 0.8, s).astype(F32)
    if arch == "mlp":
        vars_ = [VarInit("w1", u(d, h)), VarInit("b1", u(h)), VarInit("w2", u(h, 1))]
    else:
        vars_ = [VarInit("w", u(d, 1)), VarInit("b", u(1))]
    p = TrainProgram(seed=seed, arch=arch, xs=xs, y=y, vars=vars_)
    p.steps = int(rng.integers(7, 10))
    last_special = p.steps - 5  # one-off features happen at steps < last_special
    p.optimizer = OPTIMIZERS[int(rng.integers(len(OPTIMIZERS)))]
    p.lr = float(np.round(rng.choice([0.01, 0.05, 0.1, 0.2]) if p.optimizer != "Adagrad" else 0.2, 3))
    p.schedule = SCHEDULES[int(rng.integers(len(SCHEDULES)))] if coin(0.5) else None
    if coin(0.4):
        p.clip = "norm" if coin(0.5) else "global"
        p.clip_value = float(np.round(rng.uniform(0.1, 1.5), 2))
    if coin(0.3):
        p.sometimes_unused = True
        p.vars.append(VarInit("u", u(d)))
    model_vars = len(vars_) - (1 if p.sometimes_unused else 0)
    if coin(0.3):
        i = int(rng.integers(model_vars))
        m = (rng.random(p.vars[i].value.shape) < 0.6).astype(F32)
        p.masks = {i: m}
    if coin(0.3):
        p.update_every = {int(rng.integers(len(p.vars))): 2}
    if coin(0.3):
        p.assign_at = (int(rng.integers(0, last_special)), int(rng.integers(len(p.vars))),
                       "scale" if coin(0.5) else "add")
    if coin(0.35):
        p.branch = float(np.round(rng.uniform(0.05, 0.8), 3))
    p.metric = [None, "kept", "read", "logits", "sum"][int(rng.integers(5))]
    p.keep_losses = "tensor" if coin(0.6) else "float"
    p.peek = coin(0.25)
    p.persistent = coin(0.3)
    p.nested = coin(0.25)
    if "copy" not in off:
        p.copy_var = coin(0.25)
        p.copy_tensor = [None, "copy", "deepcopy"][int(rng.integers(3))] if coin(0.35) else None
    if "custom" not in off:
        p.custom = coin(0.3)
    if "host_buffer" not in off:
        p.host_buffer = coin(0.25)
    if coin(0.3):
        p.eval_at = tuple(sorted({int(rng.integers(0, last_special)) for _ in range(2)}))
    if coin(0.3):
        p.compiled_at = tuple(sorted({int(rng.integers(0, last_special)) for _ in range(2)}))
    p.compiled_model = coin(0.2)
    return p


# --------------------------------------------------------------------------
# Rendering: the program as TF2 source
# --------------------------------------------------------------------------

def _render(p: TrainProgram) -> str:
    names = p.names
    model_names = [n for n in names if n != "u"]
    v0 = names[0]
    L: list = []
    w = L.append
    w(f"# tapejax training-loop fuzzer, seed {p.seed}: {', '.join(p.features())}")
    w("import copy")
    w("")
    w("import numpy as np")
    w("")
    w("")
    w(f"def main(tf, keras, steps={p.steps}, probe=lambda step, out: None):")
    w(f"    y = tf.constant({_arr(p.y)})")
    if p.host_buffer:
        w("    data = [" + ", ".join(_arr(a) for a in p.xs) + "]")
        w("    buf = data[0].copy()  # a loader's batch buffer, refilled in place every step")
    else:
        w("    xs = [" + ", ".join(f"tf.constant({_arr(a)})" for a in p.xs) + "]")
    for v in p.vars:
        w(f"    {v.name} = tf.Variable({_arr(v.value)}, name={v.name!r})")
    w(f"    variables = [{', '.join(names)}]")
    for i, m in p.masks.items():
        w(f"    mask{i} = tf.constant({_arr(m)})")
    lr = repr(p.lr)
    if p.schedule == "exponential":
        lr = f"keras.optimizers.schedules.ExponentialDecay({p.lr}, decay_steps=2, decay_rate=0.7)"
    elif p.schedule == "piecewise":
        lr = f"keras.optimizers.schedules.PiecewiseConstantDecay([2, 4], [{p.lr}, {p.lr / 2}, {p.lr / 4}])"
    elif p.schedule == "cosine":
        lr = f"keras.optimizers.schedules.CosineDecay({p.lr}, decay_steps={p.steps})"
    if p.optimizer == "manual":
        if p.schedule is not None:
            w(f"    schedule = {lr}")
    else:
        kw = {"SGD": "", "SGD_momentum": ", momentum=0.9", "Adam": "", "RMSprop": "", "Adagrad": ""}[p.optimizer]
        cls = "SGD" if p.optimizer.startswith("SGD") else p.optimizer
        w(f"    opt = keras.optimizers.legacy.{cls}(learning_rate={lr}{kw})")
    if p.copy_var:
        w(f"    target = copy.deepcopy({v0})  # a frozen copy (DQN target), refreshed every 2 steps")
    if p.custom:
        w("    sched = {'f': 1.0, 'b': 1.0}")
        w("")
        w("    @tf.custom_gradient")
        w("    def scale_grad(t):")
        w("        def grad(dy):")
        w("            return dy * sched['b']")
        w("        return t * sched['f'], grad")
    w("")
    w("    def model(xb):")
    if p.arch == "linear":
        w("        return tf.matmul(xb, w) + b")
    elif p.arch == "sigmoid":
        w("        return 2.0 * tf.sigmoid(tf.matmul(xb, w)) + b")
    else:
        w("        h = tf.tanh(tf.matmul(xb, w1) + b1)")
        w("        return tf.matmul(h, w2)")
    if p.compiled_model:
        w("")
        w("    model_fn = tf.function(model)")
    w("")
    w("    def compute_loss(xb, use_u, f=model):")
    w("        pred = f(xb)")
    if p.custom:
        w("        pred = scale_grad(pred)")
    if p.copy_tensor == "deepcopy" and p.compiled_at:
        # (TF cannot deep-copy a graph tensor: TypeError in a tf.function, tapejax's too)
        w("        pred = copy.deepcopy(pred) if tf.executing_eagerly() else pred")
    elif p.copy_tensor:
        w(f"        pred = copy.{p.copy_tensor}(pred)")
    w("        loss = tf.reduce_mean(tf.square(pred - y))")
    if p.copy_var:
        w(f"        loss = loss + 0.1 * tf.reduce_sum(tf.square({v0} - target))")
    if p.sometimes_unused:
        w("        if use_u:")
        w("            loss = loss + 0.05 * tf.reduce_sum(tf.square(u - 0.5))")
    w("        return loss, pred")
    w("")
    w("    def process(grads):")
    for i in p.masks:
        w(f"        grads[{i}] = grads[{i}] * mask{i}")
    if p.clip == "norm":
        w(f"        grads = [None if g is None else tf.clip_by_norm(g, {p.clip_value}) for g in grads]")
    elif p.clip == "global":
        w(f"        grads, _ = tf.clip_by_global_norm(grads, {p.clip_value})")
    w("        return grads")
    w("")
    # the update, shared by the eager and the compiled step
    w("    def update(grads, step):")
    w("        pairs = [(g, v) for g, v in zip(grads, variables) if g is not None]")
    if p.optimizer == "manual":
        if p.schedule is not None:
            w("        lr = schedule(step)")
        else:
            w(f"        lr = {p.lr}")
        w("        for g, v in pairs:")
        w("            v.assign_sub(lr * g)")
    else:
        w("        if pairs:")
        w("            opt.apply_gradients(pairs)")
    if p.eval_at:
        w("")
        w("    @tf.function")
        w("    def evaluate(xb):")
        w("        return tf.reduce_mean(tf.square(model(xb) - y))")
    if p.compiled_at:
        w("")
        w("    @tf.function")
        w("    def train_step(xb, step):")
        w("        with tf.GradientTape() as tape:")
        w("            loss, pred = compute_loss(xb, True)")
        w("        grads = process(tape.gradient(loss, variables))")
        w("        update(grads, step)")
        w("        return loss, grads")
    w("")
    w("    out = {'losses': [], 'grads': [], 'aux': [], 'metrics': [], 'evals': [], 'branches': [], 'peeks': []}")
    if p.metric == "sum":
        w("    tot = tf.constant(0.0)")
    w("    for step in range(steps):")
    if p.host_buffer:
        w("        buf[...] = data[step % 2]")
        w("        xb = buf")
    else:
        w("        xb = xs[step % 2]")
    if p.custom:
        w("        sched['f'], sched['b'] = 1.0 + 0.1 * step, 1.0 - 0.3 * step")
    if p.copy_var:
        w("        if step % 2 == 0:")
        w(f"            target.assign({v0})")
    body = 8
    if p.compiled_at:
        w(f"        if step in {tuple(p.compiled_at)!r}:")
        xarg = "tf.constant(buf)" if p.host_buffer else "xb"
        w(f"            loss, grads = train_step({xarg}, tf.constant(step))")
        w("            out['losses'].append(loss)")
        w("            out['grads'].append(grads)")
        w("        else:")
        body = 12
    ind = " " * body
    tape_kw = "persistent=True" if p.persistent else ""
    use_u = "step % 2 == 0" if p.sometimes_unused else "False"
    fn = ", model_fn" if p.compiled_model else ""
    if p.nested:
        w(f"{ind}with tf.GradientTape({tape_kw}) as tape:")
        w(f"{ind}    with tf.GradientTape() as inner:")
        w(f"{ind}        loss, pred = compute_loss(xb, {use_u}{fn})")
        w(f"{ind}    penalty = inner.gradient(loss, {v0})")
        w(f"{ind}    loss = loss + 0.01 * tf.reduce_sum(tf.square(penalty))")
    else:
        w(f"{ind}with tf.GradientTape({tape_kw}) as tape:")
        w(f"{ind}    loss, pred = compute_loss(xb, {use_u}{fn})")
    if p.metric in ("kept", "read") or p.persistent:
        w(f"{ind}    mae = tf.reduce_mean(tf.abs(pred - y))")
    w(f"{ind}grads = process(tape.gradient(loss, variables))")
    if p.persistent:
        w(f"{ind}out['aux'].append(tape.gradient(mae, [{v0}]))")
        w(f"{ind}del tape")
    if p.branch is not None:
        w(f"{ind}out['branches'].append(float(loss) > {p.branch})")
        w(f"{ind}if not out['branches'][-1]:")
        w(f"{ind}    grads = [None if g is None else 0.5 * g for g in grads]")
    for i, k in p.update_every.items():
        w(f"{ind}if step % {k} != 0:  # {names[i]} is updated every {k} steps")
        w(f"{ind}    grads[{i}] = None")
    w(f"{ind}update(grads, step)")
    if p.keep_losses == "tensor":
        w(f"{ind}out['losses'].append(loss)")
    else:
        w(f"{ind}out['losses'].append(float(loss))")
    w(f"{ind}out['grads'].append(grads)")
    if p.metric == "kept":
        w(f"{ind}out['metrics'].append(mae)")
    elif p.metric == "read":
        w(f"{ind}out['metrics'].append(float(mae))")
    elif p.metric == "logits":
        w(f"{ind}out['metrics'].append(pred)  # read after later updates")
    elif p.metric == "sum":
        w(f"{ind}tot = tot + loss")
    if p.assign_at is not None:
        s, i, how = p.assign_at
        vn = names[i]
        op = f"{vn}.assign({vn} * 0.5)" if how == "scale" else f"{vn}.assign_add(tf.ones_like({vn}) * 0.25)"
        w(f"        if step == {s}:")
        w(f"            {op}")
    if p.peek:
        w(f"        out['peeks'].append({model_names[-1]}.numpy().copy())")
    if p.eval_at:
        xarg = "tf.constant(buf)" if p.host_buffer else "xb"
        w(f"        if step in {tuple(p.eval_at)!r}:")
        w(f"            out['evals'].append(evaluate({xarg}))")
    w("        probe(step, out)")
    if p.metric == "sum":
        w("    out['metrics'].append(tot)")
    w("    out['final'] = variables")
    w("    return out")
    w("")
    w("")
    w("if __name__ == '__main__':")
    w("    import tapejax")
    w("    for deferred in (True, False):")
    w("        tapejax.set_deferred_execution(deferred)")
    w("        print('tapejax deferred' if deferred else 'tapejax eager', main(tapejax, tapejax.keras))")
    w("    import tensorflow, tf_keras")
    w("    print('tensorflow', main(tensorflow, tf_keras))")
    return "\n".join(L) + "\n"


# --------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Mode:
    """Where a program runs: TF, or tapejax with deferral / speculation on or off."""
    backend: str                 # 'tapejax' | 'tensorflow'
    deferred: bool = True
    speculate: bool = True

    def __str__(self) -> str:
        if self.backend == "tensorflow":
            return "tensorflow"
        return f"tapejax(deferred={self.deferred}, speculate={self.speculate})"


TF = Mode("tensorflow")
MODES = (Mode("tapejax", True, True), Mode("tapejax", True, False),
         Mode("tapejax", False, True), Mode("tapejax", False, False))
EAGER = Mode("tapejax", False, False)


@dataclasses.dataclass(frozen=True)
class Raised:
    """A run that raised: compared by class name."""
    name: str
    message: str

    def __repr__(self) -> str:
        return f"Raised({self.name}: {self.message[:300]})"


@dataclasses.dataclass
class MemoryProbe:
    """Counts at the ends of two steps: live jax arrays and tensors kept in the results."""
    steps: tuple
    live: list = dataclasses.field(default_factory=list)
    kept: list = dataclasses.field(default_factory=list)

    def __call__(self, step: int, out: dict) -> None:
        if step in self.steps:
            import jax
            gc.collect()
            self.live.append(len(jax.live_arrays()))
            self.kept.append(sum(1 for _ in _tensors(out)))


@dataclasses.dataclass
class Run:
    result: Any                  # numpy-normalised results, or Raised
    probe: MemoryProbe | None


def _tensors(x) -> Iterator:
    if isinstance(x, dict):
        for v in x.values():
            yield from _tensors(v)
    elif isinstance(x, (list, tuple)):
        for v in x:
            yield from _tensors(v)
    elif hasattr(x, "numpy") and not isinstance(x, np.ndarray):
        yield x


def tensorflow_modules():
    """(tensorflow, tf_keras), or None when TensorFlow does not import."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    try:
        import tensorflow
        import tf_keras
    except ImportError:
        return None
    logging.getLogger("tensorflow").setLevel(logging.ERROR)
    return tensorflow, tf_keras


def _normalise(x):
    if x is None or isinstance(x, (bool, float, int, str)):
        return x
    if isinstance(x, dict):
        return {k: _normalise(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_normalise(v) for v in x]
    if type(x).__name__ == "IndexedSlices":
        raise TypeError("unexpected IndexedSlices in a training-loop result")
    if isinstance(x, np.ndarray):
        return x.copy()
    if hasattr(x, "numpy"):
        return np.array(x.numpy())
    return x


@contextlib.contextmanager
def _tapejax_mode(mode: Mode):
    import tapejax
    d = tapejax.set_deferred_execution(mode.deferred)
    s = tapejax.set_speculative_updates(mode.speculate)
    try:
        yield tapejax
    finally:
        tapejax.set_deferred_execution(d)
        tapejax.set_speculative_updates(s)


def compile_main(prog: TrainProgram) -> Callable:
    """``main`` of the rendered source (registered with linecache: tracebacks show its lines)."""
    src, name = prog.source(), f"<trainfuzz seed {prog.seed}>"
    linecache.cache[name] = (len(src), None, src.splitlines(True), name)
    ns: dict = {"__name__": f"trainfuzz_{prog.seed}"}
    exec(compile(src, name, "exec"), ns)  # noqa: S102 - running the rendered program is the point
    return ns["main"]


def run(prog: TrainProgram, mode: Mode, memory: bool = False) -> Run:
    """Run the rendered program once under ``mode``; exceptions become ``Raised``."""
    main = compile_main(prog)
    probe = MemoryProbe((prog.steps - 5, prog.steps - 1)) if memory else None
    hook = probe if probe is not None else (lambda step, out: None)
    if mode.backend == "tensorflow":
        mods = tensorflow_modules()
        assert mods is not None, "TensorFlow does not import"
    if memory:
        # the probes' gc.collect() then walks only what this run allocates (a full collection
        # with TensorFlow imported costs a second on a busy machine); garbage from before stays
        # frozen at both probes, so it does not change the growth
        gc.freeze()
    try:
        if mode.backend == "tensorflow":
            tf, keras = mods
            res = _normalise(main(tf, keras, probe=hook))
        else:
            with _tapejax_mode(mode) as tj:
                res = _normalise(main(tj, tj.keras, probe=hook))
    except Exception as e:  # noqa: BLE001 - an exception is a result to compare
        tb = traceback.extract_tb(e.__traceback__)
        where = next((f"line {fr.lineno}: {fr.line.strip()}" for fr in reversed(tb)
                      if fr.filename.startswith("<trainfuzz")), "")
        res = Raised(type(e).__name__, f"{str(e).strip().splitlines()[0] if str(e).strip() else ''} [{where}]")
    finally:
        if memory:
            gc.unfreeze()
    return Run(res, probe)


# --------------------------------------------------------------------------
# Comparison
# --------------------------------------------------------------------------

def compare(got, want, where: str = "") -> list:
    """Mismatch messages between two normalised results (None must match None)."""
    if isinstance(want, Raised) or isinstance(got, Raised):
        if not (isinstance(want, Raised) and isinstance(got, Raised) and want.name == got.name):
            return [f"{where or 'result'}: got {_short(got)}, want {_short(want)}"]
        return []
    if isinstance(want, dict):
        if not isinstance(got, dict) or set(got) != set(want):
            return [f"{where}: got keys {sorted(got) if isinstance(got, dict) else type(got)}, want {sorted(want)}"]
        return [e for k in want for e in compare(got[k], want[k], f"{where}.{k}" if where else k)]
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            n = len(got) if isinstance(got, list) else type(got).__name__
            return [f"{where}: got list of {n}, want list of {len(want)}"]
        return [e for k, (g, w) in enumerate(zip(got, want)) for e in compare(g, w, f"{where}[{k}]")]
    if want is None or got is None:
        return [] if want is None and got is None else [f"{where}: got {got!r}, want {want!r}"]
    if isinstance(want, bool) or isinstance(got, bool):
        return [] if got is want else [f"{where}: got {got!r}, want {want!r}"]
    if (isinstance(want, float) or isinstance(got, float)) and type(got) is not type(want):
        return [f"{where}: got {type(got).__name__} {got!r}, want {type(want).__name__} {want!r}"]
    g, w = np.asarray(got), np.asarray(want)
    if g.dtype != w.dtype or g.shape != w.shape:
        return [f"{where}: got {g.dtype}{g.shape}, want {w.dtype}{w.shape}"]
    scale = max(1.0, float(np.max(np.abs(w.astype(np.float64)), initial=0)))
    if not np.allclose(g, w, rtol=RTOL, atol=ATOL * scale, equal_nan=True):
        return [f"{where}: values differ\n   got  {g!r}\n   want {w!r}"]
    return []


def _short(x) -> str:
    r = repr(x)
    return r if len(r) <= 400 else r[:400] + " ..."


def _branch_tie(prog: TrainProgram, *results) -> bool:
    """A branch decision differs only because a loss is within round-off of the threshold."""
    if prog.branch is None:
        return False
    for r in results:
        if isinstance(r, dict):
            for loss in r["losses"]:
                v = float(np.asarray(loss))
                if abs(v - prog.branch) < 1e-3 * (1 + abs(prog.branch)):
                    return True
    return False


@dataclasses.dataclass
class Failure:
    mode: Mode
    kind: str          # 'values' | 'memory' | 'reference raised'
    errors: list

    def __str__(self) -> str:
        errs = "\n  ".join(self.errors[:6]) + ("\n  ..." if len(self.errors) > 6 else "")
        return f"{self.mode} [{self.kind}]:\n  {errs}"


@dataclasses.dataclass
class Report:
    prog: TrainProgram
    reference: Mode
    failures: list

    @property
    def ok(self) -> bool:
        return not self.failures

    def __str__(self) -> str:
        head = f"seed {self.prog.seed} ({', '.join(self.prog.features())}) vs {self.reference}:"
        return head + "\n" + "\n".join(map(str, self.failures)) + \
            "\n---- reproduction (python3 repro.py) ----\n" + self.prog.source()


def memory_errors(prog: TrainProgram, mode: Mode, probe: MemoryProbe) -> list:
    """Live jax arrays may grow between the probes only by what the program keeps."""
    if len(probe.live) != 2:
        return []
    grew, kept = probe.live[1] - probe.live[0], probe.kept[1] - probe.kept[0]
    # an unread pending value may keep its own inputs (the Variable values it read) alive
    per_kept = 1 if not mode.deferred else len(prog.vars) + 4
    # float(t) on a kept jax array leaves JAX's own host copy alive with it (the branch's float(loss))
    span = probe.steps[1] - probe.steps[0]
    host_copies = span if prog.branch is not None and prog.keep_losses == "tensor" else 0
    allowed = per_kept * kept + host_copies + 2
    if grew > allowed:
        msg = (f"live jax arrays grew by {grew} over steps {probe.steps} (kept tensors +{kept}, "
               f"allowed {allowed}): {probe.live}")
        return [msg]
    return []


def check(prog: TrainProgram, modes=MODES, tensorflow: bool | None = None, memory: bool = True) -> Report:
    """Run ``prog`` in every mode (and TF when it imports, unless ``tensorflow=False``),
    compare with the reference (TF, else tapejax with deferral off)."""
    use_tf = tensorflow if tensorflow is not None else tensorflow_modules() is not None
    runs = {m: run(prog, m, memory=memory and m.backend == "tapejax") for m in modes}
    if use_tf:
        ref_mode = TF
        runs[TF] = run(prog, TF)
    else:
        ref_mode = EAGER if EAGER in runs else modes[0]
    want = runs[ref_mode].result
    failures = []
    if isinstance(want, Raised):
        failures.append(Failure(ref_mode, "reference raised", [repr(want)]))
    for m in modes:
        if m == ref_mode:
            continue
        got = runs[m].result
        errs = compare(got, want)
        if errs and _branch_tie(prog, got, want):
            errs = []
        if errs:
            failures.append(Failure(m, "values", errs))
    if memory:
        for m in modes:
            r = runs[m]
            if r.probe is not None and not isinstance(r.result, Raised):
                errs = memory_errors(prog, m, r.probe)
                if errs:
                    failures.append(Failure(m, "memory", errs))
    return Report(prog, ref_mode, failures)


# --------------------------------------------------------------------------
# Shrinking
# --------------------------------------------------------------------------

def _simpler(p: TrainProgram, min_steps: int) -> Iterator[TrainProgram]:
    """Candidate programs with one feature fewer (or fewer steps), most drastic first."""
    rep = dataclasses.replace
    if p.arch != "linear":  # the same data, a linear model on slices of the first Variables
        w0, b0 = p.vars[0].value, p.vars[1].value
        lin = [VarInit("w", w0[:, :1].copy()), VarInit("b", b0[:1].copy()), *p.vars[len(p.vars) - p.sometimes_unused:]]
        yield rep(p, arch="linear", vars=lin, masks={}, update_every={}, assign_at=None)
    for name, default in (("compiled_at", ()), ("eval_at", ()), ("nested", False), ("persistent", False),
                          ("custom", False), ("copy_var", False), ("copy_tensor", None),
                          ("host_buffer", False), ("compiled_model", False), ("branch", None), ("metric", None), ("peek", False),
                          ("assign_at", None), ("clip", None), ("schedule", None), ("masks", {}),
                          ("update_every", {}), ("keep_losses", "float")):
        if getattr(p, name) != default:
            yield rep(p, **{name: default})
    if p.sometimes_unused:
        vars_ = [v for v in p.vars if v.name != "u"]
        ue = {i: k for i, k in p.update_every.items() if i < len(vars_)}
        at = p.assign_at if p.assign_at is None or p.assign_at[1] < len(vars_) else None
        yield rep(p, sometimes_unused=False, vars=vars_, update_every=ue, assign_at=at)
    if p.optimizer != "manual":
        yield rep(p, optimizer="manual")
    if p.optimizer not in ("manual", "SGD"):
        yield rep(p, optimizer="SGD")
    for at in (p.compiled_at, p.eval_at):
        if len(at) > 1:
            name = "compiled_at" if at is p.compiled_at else "eval_at"
            for s in at:
                yield rep(p, **{name: (s,)})
    if len(p.compiled_at) == 1 and p.compiled_at[0] > 0:
        yield rep(p, compiled_at=(p.compiled_at[0] - 1,))
    if len(p.eval_at) == 1 and p.eval_at[0] > 0:
        yield rep(p, eval_at=(p.eval_at[0] - 1,))
    if p.steps > min_steps:
        latest = max([*p.compiled_at, *p.eval_at, p.assign_at[0] if p.assign_at else 0])
        if p.steps - 1 > latest + (5 if min_steps >= 7 else 1):
            yield rep(p, steps=p.steps - 1)


def shrink(prog: TrainProgram, fails: Callable[[TrainProgram], bool], budget: int = 60,
           min_steps: int = 7) -> TrainProgram:
    """Greedy: take the first simpler program that still ``fails``, until none does.  Keep
    ``min_steps >= 7`` for a memory failure (the probes follow a warm-up step)."""
    tries = 0
    progress = True
    while progress and tries < budget:
        progress = False
        for cand in _simpler(prog, min_steps):
            tries += 1
            if fails(cand):
                prog, progress = cand, True
                break
            if tries >= budget:
                break
    return prog


def failing_in(mode: Mode, kind: str, modes=None, tensorflow: bool | None = None) -> Callable:
    """A predicate for ``shrink``: the program still fails in ``mode`` with ``kind``."""
    def fails(p: TrainProgram) -> bool:
        ms = modes or tuple(dict.fromkeys([mode, EAGER]) if mode.backend == "tapejax" else (EAGER,))
        rep = check(p, modes=ms, tensorflow=tensorflow, memory=(kind == "memory"))
        return any(f.mode == mode and f.kind == kind for f in rep.failures)
    return fails
