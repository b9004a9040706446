"""``tf.summary``: TensorBoard event files written with tensorboardX.

``create_file_writer(logdir)`` opens an event file (tensorboardX's ``EventsWriter``);
``scalar`` / ``histogram`` / ``image`` / ``text`` write one ``Summary`` value
each, in TF2's layout (the tensor and plugin name TF's own summary ops write:
a float32 scalar for ``scalars``, TF's ``[k, 3]`` float64 bucket table for
``histograms``, ``[width, height, png ...]`` strings for ``images``, a string
tensor for ``text``), built from tensorboardX's protos and its PNG encoder, so
TensorBoard and TF's readers see what TF writes.  Tags get the enclosing
``tapejax.name_scope`` (``scope/loss``); the step is the ``step`` argument or
``experimental.set_step``'s (an int, a Tensor or a Variable, read when the
summary is written); with no default writer, or under ``record_if(False)``,
nothing is written and the result is ``False``, as TF.

Inside ``tapejax.function`` a summary records the value *at run time*: the
value and step go to the host through an ordered ``jax.debug.callback``, so
every call writes its own values, in call order (``flush`` waits for pending
callbacks with ``jax.effects_barrier``).  As in TF, the writer, a Python step
and a Python ``record_if`` condition are those of the trace.

``write`` writes any tensor with the caller's ``SummaryMetadata`` (tag as given, as TF);
``audio`` encodes clips as TF's ``encode_wav`` does (16-bit PCM, ``round(x * 32768)``
clamped) in TensorBoard's ``[k, 2]`` layout; ``graph`` writes a ``GraphDef`` event (from
TensorFlow: tapejax has no TF graphs of its own).

``trace_on`` / ``trace_off`` / ``trace_export`` are accepted and record
nothing: tapejax has no graph of TF ops to export (a compiled step's program
is ``jax.jit(...).lower(...).as_text()``).

tensorboardX (and Pillow, for images) come with the ``summary`` extra
(``pip install tapejax[summary]``); creating a writer without them raises an
ImportError that names it.
"""
import contextlib
import itertools
import logging
import os
import threading
import time
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from ..core import state as _state
from ..core.convert import constant, convert_to_tensor
from ..core.errors import InvalidArgumentError
from ..core.modules import new_module
from ..core.tensor import Tensor
from ..core.variable import Variable
from ..ops.checks import traced
from ._shapes import assert_rank
from ._summary_data import histogram_buckets, image_strings, scalar_value, text_array, wav_strings

__all__ = ["SummaryWriter", "audio", "create_file_writer", "create_noop_writer", "experimental", "flush", "graph",
           "histogram", "image", "record_if", "scalar", "should_record_summaries", "text", "trace_export",
           "trace_off", "trace_on", "write"]

_log = logging.getLogger("tapejax")


def _tbx():
    try:
        from tensorboardX.event_file_writer import EventsWriter
        from tensorboardX.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2
    except ImportError as e:  # pragma: no cover - the extra is installed in CI
        raise ImportError("tapejax.summary writes TensorBoard files with tensorboardX: install it with "
                          "`pip install tapejax[summary]` (or `pip install tensorboardX`)") from e
    return EventsWriter, event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2


_FILE_COUNT = itertools.count()


class SummaryWriter:
    """``tf.summary.SummaryWriter``: one event file in ``logdir``, written by tensorboardX's
    ``EventsWriter`` (named as TF names it: ``events.out.tfevents.<time>.<host>.<pid>.<n>.v2``).

    Events are appended when a summary is written (from a compiled step: when its callback
    runs) and flushed to disk every ``max_queue`` events (default 10), when ``flush_millis``
    (default 120000) have passed at a write, on ``flush()`` and on ``close()``.
    ``as_default(step=None)`` makes it the writer the summary functions use inside the block;
    ``set_as_default`` for good.
    """

    def __init__(self, logdir: str, max_queue: Optional[int] = None, flush_millis: Optional[int] = None,
                 filename_suffix: Optional[str] = None):
        events_writer = _tbx()[0]
        self._logdir = str(logdir)
        os.makedirs(self._logdir, exist_ok=True)
        suffix = f".{os.getpid()}.{next(_FILE_COUNT)}" + (".v2" if filename_suffix is None else filename_suffix)
        self._lock = threading.Lock()
        self._writer = events_writer(os.path.join(self._logdir, "events"), suffix)
        self._max_queue = 10 if max_queue is None else max(1, int(max_queue))
        self._flush_secs = 120.0 if flush_millis is None else flush_millis / 1000.0
        self._pending = 0
        self._last_flush = time.time()
        self._closed = False

    @property
    def logdir(self) -> str:
        return self._logdir

    def write(self, tag: str, tensor_proto: Any, plugin: str, step: int, description: str = "",
              metadata: Any = None) -> None:
        """Append one summary value (a ``TensorProto`` of TF2's layout for ``plugin``) at ``step``
        (``metadata``: a tensorboardX ``SummaryMetadata`` given whole, then ``plugin`` and
        ``description`` are unused)."""
        _, event_pb2, summary_pb2, _, _ = _tbx()
        meta = metadata if metadata is not None else summary_pb2.SummaryMetadata(
            plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name=plugin),
            summary_description=description)
        summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, tensor=tensor_proto,
                                                                       metadata=meta)])
        self._append(event_pb2.Event(summary=summary, step=int(step), wall_time=time.time()))

    def write_graph(self, graph_def: bytes) -> None:
        """Append an event holding a serialized ``GraphDef`` (TensorBoard's graph tab)."""
        _, event_pb2, _, _, _ = _tbx()
        self._append(event_pb2.Event(graph_def=graph_def, wall_time=time.time()))

    def _append(self, event: Any) -> None:
        with self._lock:
            if self._closed:   # TF: writing to a closed writer is a no-op
                return
            self._writer.write_event(event)
            self._pending += 1
            if self._pending >= self._max_queue or event.wall_time - self._last_flush >= self._flush_secs:
                self._flush_locked()

    def _flush_locked(self) -> None:
        self._writer.flush()
        self._pending = 0
        self._last_flush = time.time()

    @contextlib.contextmanager
    def as_default(self, step: Any = None):
        """The default writer inside the block (and ``step`` the default step, when given)."""
        st = _STATE
        prev_writer, prev_step = st.writer, st.step
        st.writer = self
        if step is not None:
            st.step = step
        try:
            yield self
        finally:
            st.writer = prev_writer
            if step is not None:
                st.step = prev_step

    def set_as_default(self, step: Any = None) -> None:
        _STATE.writer = self
        if step is not None:
            _STATE.step = step

    def init(self) -> None:
        """Accepted for TF compatibility (the file is created with the writer)."""

    def flush(self) -> None:
        jax.effects_barrier()   # the values of summaries in compiled steps still on their way
        with self._lock:
            if not self._closed:
                self._flush_locked()

    def close(self) -> None:
        jax.effects_barrier()
        with self._lock:
            if not self._closed:
                self._writer.close()
                self._closed = True

    def __repr__(self):
        return f"<tapejax.summary.SummaryWriter logdir={self._logdir!r}>"


class _NoopWriter(SummaryWriter):
    """``create_noop_writer()``: a default writer that writes nothing."""

    def __init__(self):   # (no file)
        self._logdir = ""
        self._closed = True
        self._lock = threading.Lock()

    def write(self, tag, tensor_proto, plugin, step, description="", metadata=None):
        return None

    def write_graph(self, graph_def):
        return None

    def flush(self):
        return None

    def close(self):
        return None


class _State(threading.local):
    writer: Optional[SummaryWriter] = None
    step: Any = None
    condition: Any = True


_STATE = _State()


def create_file_writer(logdir, max_queue=None, flush_millis=None, filename_suffix=None, name=None,
                       experimental_trackable=False, experimental_mesh=None) -> SummaryWriter:
    """``tf.summary.create_file_writer``: a writer to a new event file in ``logdir``."""
    if logdir is None:
        raise ValueError("Argument `logdir` cannot be None")
    return SummaryWriter(logdir, max_queue, flush_millis, filename_suffix)


def create_noop_writer() -> SummaryWriter:
    """``tf.summary.create_noop_writer``."""
    return _NoopWriter()


@contextlib.contextmanager
def record_if(condition: Any):
    """``tf.summary.record_if``: write only while ``condition`` (a bool, a bool Tensor, or a
    callable returning one, called at each summary) holds."""
    prev = _STATE.condition
    _STATE.condition = condition
    try:
        yield
    finally:
        _STATE.condition = prev


def _condition() -> Any:
    c = _STATE.condition
    return c() if callable(c) else c


def should_record_summaries() -> Tensor:
    """``tf.summary.should_record_summaries``: a default writer and a true ``record_if``."""
    if _STATE.writer is None:
        return constant(False)
    c = _condition()
    return constant(bool(c)) if isinstance(c, (bool, np.bool_)) else convert_to_tensor(c)


def flush(writer: Optional[SummaryWriter] = None, name=None) -> None:
    """``tf.summary.flush``: flush ``writer`` (default: the default writer)."""
    w = writer if writer is not None else _STATE.writer
    if w is not None:
        w.flush()


def get_step() -> Any:
    """``tf.summary.experimental.get_step``."""
    return _STATE.step


def set_step(step: Any) -> None:
    """``tf.summary.experimental.set_step``: the step of summaries given none (an int, a Tensor or
    a Variable, read at each summary)."""
    _STATE.step = step


# -- writing -------------------------------------------------------------------------------

def _tag(name: str) -> str:
    return _state._local.name_scope + name


def _value_of(x: Any) -> Any:
    """An array (concrete or traced) for a Tensor, a Variable (read now) or data."""
    if isinstance(x, Variable):
        return x._read()._value
    if isinstance(x, Tensor):
        return x._value
    return convert_to_tensor(x)._value


def _emit(name: str, data_value: Any, step: Any, proto_of: Callable[[np.ndarray], Any], plugin: str,
          description: Optional[str], metadata: Any = None, scoped: bool = True) -> Tensor:
    """Write one summary now (eager) or when the compiled step runs (traced); ``data_value`` may
    be a callable giving it, called only when the summary is recorded."""
    writer = _STATE.writer
    if writer is None:
        return constant(False)
    cond = _condition()
    if isinstance(cond, (bool, np.bool_)) and not cond:
        return constant(False)
    if step is None:
        step = _STATE.step
    if step is None:
        raise ValueError("No step set. Please specify one either through the `step` argument or through "
                         "tf.summary.experimental.set_step()")
    step_value = _value_of(step)
    cond_value = jnp.asarray(cond) if not isinstance(cond, (bool, np.bool_)) else None
    cond_value = _value_of(cond) if isinstance(cond, (Tensor, Variable)) else cond_value
    if callable(data_value):
        data_value = _value_of(data_value())
    tag = _tag(name) if scoped else name
    desc = description or ""

    def write(value, step_now, cond_now):
        if cond_now is not None and not bool(np.asarray(cond_now)):
            return
        writer.write(tag, proto_of(np.asarray(value)), plugin, int(np.asarray(step_now)), desc, metadata)

    if _state._local.collector is not None or traced(data_value, step_value, cond_value):
        # inside a compiled step (or a traced body): written when the program runs, every call
        jax.debug.callback(write, data_value, step_value, cond_value, ordered=True)
        return Tensor(jnp.asarray(True) if cond_value is None else jnp.asarray(cond_value, bool))
    write(data_value, step_value, cond_value)
    return constant(True if cond_value is None else bool(np.asarray(cond_value)))


def _tensor_proto(a: np.ndarray) -> Any:
    """A ``TensorProto`` of a float32/float64 array (as TF's ``make_tensor_proto``) or of bytes."""
    _, _, _, tensor_pb2, tensor_shape_pb2 = _tbx()
    shape = tensor_shape_pb2.TensorShapeProto(dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=int(d))
                                                   for d in a.shape])
    if a.dtype.kind in "OSU":
        return tensor_pb2.TensorProto(dtype="DT_STRING", tensor_shape=shape,
                                      string_val=[s if isinstance(s, bytes) else str(s).encode()
                                                  for s in a.reshape(-1)])
    dtype = _TF_DTYPES.get(a.dtype.name)
    if dtype is None:
        raise TypeError(f"tf.summary: no TensorBoard dtype for a tensor of dtype {a.dtype.name}")
    return tensor_pb2.TensorProto(dtype=dtype, tensor_shape=shape, tensor_content=np.ascontiguousarray(a).tobytes())


#: NumPy dtype name -> TF's ``DataType`` enum name (``types.proto``).
_TF_DTYPES = {"float32": "DT_FLOAT", "float64": "DT_DOUBLE", "float16": "DT_HALF", "bfloat16": "DT_BFLOAT16",
              "int8": "DT_INT8", "int16": "DT_INT16", "int32": "DT_INT32", "int64": "DT_INT64", "uint8": "DT_UINT8",
              "uint16": "DT_UINT16", "uint32": "DT_UINT32", "uint64": "DT_UINT64", "bool": "DT_BOOL",
              "complex64": "DT_COMPLEX64", "complex128": "DT_COMPLEX128"}


def scalar(name: str, data: Any, step: Any = None, description: Optional[str] = None) -> Tensor:
    """``tf.summary.scalar``: a scalar, written as float32 (TF's ``scalars`` plugin)."""
    v = _value_of(data)
    if v.ndim != 0:
        raise ValueError(f"Expected scalar shape, saw shape: {tuple(v.shape)}.")
    return _emit(name, v, step, lambda a: _tensor_proto(scalar_value(a)), "scalars", description)


def histogram(name: str, data: Any, step: Any = None, buckets: Optional[int] = None,
              description: Optional[str] = None) -> Tensor:
    """``tf.summary.histogram``: TF's bucket table (``buckets`` equal-width buckets between the
    data's min and max, default 30; float64 ``[k, 3]`` rows of left edge, right edge, count)."""
    v = _value_of(data)
    k = 30 if buckets is None else int(buckets)
    return _emit(name, v, step, lambda a: _tensor_proto(histogram_buckets(a, k)), "histograms", description)


def image(name: str, data: Any, step: Any = None, max_outputs: int = 3,
          description: Optional[str] = None) -> Tensor:
    """``tf.summary.image``: ``data`` of shape ``[k, h, w, c]`` (c = 1, 3 or 4; floats in [0, 1]
    or uint8), the first ``max_outputs`` images as PNGs."""
    v = _value_of(data)
    assert_rank(Tensor(v), 4)
    n = int(max_outputs)
    return _emit(name, v, step, lambda a: _tensor_proto(image_strings(a, n)), "images", description)


def text(name: str, data: Any, step: Any = None, description: Optional[str] = None) -> Tensor:
    """``tf.summary.text``: a string, or a list / NumPy array of strings (tapejax has no string
    Tensors), written as TF's string tensor."""
    arr = text_array(data)
    writer_value = jnp.zeros(())   # the data is host data; only the step may be traced

    def proto(_unused):
        return _tensor_proto(arr)
    return _emit(name, writer_value, step, proto, "text", description)


def _metadata(metadata: Any) -> Any:
    """``write``'s ``metadata`` as tensorboardX's ``SummaryMetadata``: None (empty), its
    serialized bytes, or a ``SummaryMetadata`` proto (TF's, TensorBoard's or tensorboardX's)."""
    summary_pb2 = _tbx()[2]
    if metadata is None:
        return summary_pb2.SummaryMetadata()
    if isinstance(metadata, (bytes, bytearray)):
        return summary_pb2.SummaryMetadata.FromString(bytes(metadata))
    serialize = getattr(metadata, "SerializeToString", None)
    if serialize is None or getattr(getattr(metadata, "DESCRIPTOR", None), "name", None) != "SummaryMetadata":
        raise TypeError(f"Cannot convert {metadata!r} to EagerTensor of dtype string (argument `metadata` of "
                        "tf.summary.write must be a SummaryMetadata proto or its serialized bytes)")
    return summary_pb2.SummaryMetadata.FromString(serialize())


def write(tag: str, tensor: Any, step: Any = None, metadata: Any = None, name: Optional[str] = None) -> Tensor:
    """``tf.summary.write``: ``tensor`` (any numeric dtype; a callable giving it is called only when
    the summary is recorded) under ``tag`` as given (no name scope), with ``metadata`` (a
    ``SummaryMetadata`` or its bytes; default empty)."""
    meta = _metadata(metadata)
    value = tensor if callable(tensor) and not isinstance(tensor, (Tensor, Variable)) else _value_of(tensor)
    return _emit(tag, value, step, _tensor_proto, meta.plugin_data.plugin_name, meta.summary_description,
                 metadata=meta, scoped=False)


def audio(name: str, data: Any, sample_rate: Any, step: Any = None, max_outputs: int = 3,
          encoding: Optional[str] = None, description: Optional[str] = None) -> Tensor:
    """``tf.summary.audio``: ``data`` of shape ``[k, t, c]`` (floats in [-1, 1]), the first
    ``max_outputs`` clips as 16-bit PCM WAV (TF's ``encode_wav``) with empty labels, a ``[k, 2]``
    string tensor in TensorBoard's ``audio`` layout."""
    if encoding is None:
        encoding = "wav"
    if encoding != "wav":
        raise ValueError(f"Unknown encoding: {encoding!r}")
    v = _value_of(data)
    if v.ndim != 3:
        raise ValueError(f"Tensor  must have rank 3.  Received rank {v.ndim}, shape {tuple(v.shape)}")
    n = int(max_outputs)
    if n < 0:
        raise InvalidArgumentError(None, None, f"Argument `max_outputs` must be >= 0; got {n}")
    rate_value = sample_rate if isinstance(sample_rate, (int, np.integer)) else _value_of(sample_rate)
    if traced(rate_value):
        raise ValueError("tf.summary.audio in tapejax.function: argument `sample_rate` must be a Python int "
                         "or a Tensor computed outside the function (the WAV header is written on the host)")
    rate = int(np.asarray(rate_value))
    summary_pb2 = _tbx()[2]
    meta = summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="audio", content=_AUDIO_WAV_CONTENT),
        summary_description=description or "")
    return _emit(name, v, step, lambda a: _tensor_proto(wav_strings(a, rate, n)), "audio", description,
                 metadata=meta)


#: TensorBoard's ``AudioPluginData(encoding=WAV)`` serialized (field 2, WAV = 11).
_AUDIO_WAV_CONTENT = b"\x10\x0b"


def graph(graph_data: Any) -> Tensor:
    """``tf.summary.graph``: write a ``GraphDef`` (TF's ``tf.compat.v1.GraphDef`` or any
    ``GraphDef`` proto, or a TF ``tf.Graph``) to the default writer, eagerly only (TF's
    ValueError inside a compiled step).  tapejax makes no TF graphs of its own: this writes the
    graphs a user has from TensorFlow."""
    if _state._local.collector is not None:
        raise ValueError("graph() cannot be invoked inside a graph context.")
    writer = _STATE.writer
    if writer is None:
        return constant(False)
    cond = _condition()
    if not bool(np.asarray(_value_of(cond)) if isinstance(cond, (Tensor, Variable)) else cond):
        return constant(False)
    given = graph_data
    as_graph_def = getattr(graph_data, "as_graph_def", None)
    descriptor = getattr(graph_data, "DESCRIPTOR", None)
    if as_graph_def is not None and callable(as_graph_def):
        graph_data = as_graph_def(add_shapes=True)
    elif descriptor is None or getattr(descriptor, "name", None) != "GraphDef":
        graph_data = None
    if graph_data is not None:   # (map fields in key order, as TF's writer serializes them)
        data = graph_data.SerializeToString(deterministic=True)
    else:
        raise ValueError("Argument 'graph_data' is not tf.Graph or tf.compat.v1.GraphDef. Received "
                         f"graph_data={given} of type {type(given).__name__}.")
    writer.write_graph(data)
    return constant(True)


def trace_on(graph: bool = True, profiler: bool = False, profiler_outdir: Optional[str] = None) -> None:
    """``tf.summary.trace_on``: accepted; tapejax records no op graph (see the module docstring)."""


def trace_off() -> None:
    """``tf.summary.trace_off``: accepted (nothing was recording)."""


def trace_export(name: str, step: Any = None, profiler_outdir: Optional[str] = None) -> None:
    """``tf.summary.trace_export``: writes nothing; logs that there is no trace, as TF does when
    tracing was never turned on."""
    _log.warning("tapejax.summary.trace_export: tapejax records no op graph to export (for a compiled "
                 "step's program use jax.jit(fn).lower(*args).as_text())")


experimental = new_module("tapejax.summary.experimental", "``tf.summary.experimental``",
                          {"get_step": get_step, "set_step": set_step})
