"""``tf.io.serialize_tensor`` / ``tf.io.parse_tensor``: a tensor as TF's ``TensorProto`` bytes.

As ``example_proto`` does for Examples, TF's ``TensorProto`` (``tensor.proto``), its shape
(``tensor_shape.proto``) and the ``DataType`` enum (``types.proto``; the numbers of the dtypes
tapejax has) are written here as ``FileDescriptorProto``s, in a pool of their own, and made into
protobuf classes on first use.  ``serialize_tensor`` writes what TF writes: the dtype, the
shape (an empty shape message for a scalar), numeric values as little-endian
``tensor_content``, strings as ``string_val``, so the bytes are TF's.  ``parse_tensor`` also
reads the typed value fields (``float_val`` ...) that ``tf.make_tensor_proto`` writes, a value
list shorter than the tensor filled with its last value (TF's rule).  The result is a Tensor
(tapejax's dtypes: int64 is int32 without JAX's 64-bit mode, float64 needs it) or host strings.
"""
import functools
from typing import Any, NamedTuple, Optional

import numpy as np

from ..core import dtypes as _dtypes
from ..core.convert import convert_to_tensor
from ..core.errors import InvalidArgumentError
from ..core.tensor import Tensor
from .example_proto import protobuf_modules
from .hostops import host_result, host_strings
from .hostvalues import numeric_result

#: TF's DataType numbers (types.proto) of the dtypes tapejax can hold, and ``string``
DATA_TYPES = {"float32": 1, "float64": 2, "int32": 3, "uint8": 4, "int16": 5, "int8": 6, "string": 7,
              "complex64": 8, "int64": 9, "bool": 10, "bfloat16": 14, "uint16": 17, "complex128": 18,
              "float16": 19, "uint32": 22, "uint64": 23}
_NAMES = {v: k for k, v in DATA_TYPES.items()}
#: TF's short names in its messages
_SHORT = {"float32": "float", "float64": "double", "float16": "half"}
#: the typed value field of each dtype (make_tensor_proto's form)
_VAL_FIELDS = {"float32": "float_val", "float64": "double_val", "int32": "int_val", "uint8": "int_val",
               "int16": "int_val", "int8": "int_val", "uint16": "int_val", "int64": "int64_val", "bool": "bool_val",
               "complex64": "scomplex_val", "complex128": "dcomplex_val", "float16": "half_val",
               "bfloat16": "half_val", "uint32": "uint32_val", "uint64": "uint64_val"}


class _Classes(NamedTuple):
    TensorProto: Any
    TensorShapeProto: Any


@functools.lru_cache(maxsize=None)
def classes() -> _Classes:
    """The TensorProto classes (built once, in a pool of their own)."""
    descriptor_pb2, descriptor_pool, message_factory = protobuf_modules()
    F = descriptor_pb2.FieldDescriptorProto
    types = descriptor_pb2.FileDescriptorProto(name="tensorflow/core/framework/types.proto", package="tensorflow",
                                               syntax="proto3")
    enum = types.enum_type.add(name="DataType")
    enum.value.add(name="DT_INVALID", number=0)
    for name, number in sorted(DATA_TYPES.items(), key=lambda kv: kv[1]):
        enum.value.add(name=f"DT_{name.upper()}", number=number)
    shape = descriptor_pb2.FileDescriptorProto(name="tensorflow/core/framework/tensor_shape.proto",
                                               package="tensorflow", syntax="proto3")
    msg = shape.message_type.add(name="TensorShapeProto")
    dim = msg.nested_type.add(name="Dim")
    dim.field.add(name="size", number=1, label=F.LABEL_OPTIONAL, type=F.TYPE_INT64)
    dim.field.add(name="name", number=2, label=F.LABEL_OPTIONAL, type=F.TYPE_STRING)
    msg.field.add(name="dim", number=2, label=F.LABEL_REPEATED, type=F.TYPE_MESSAGE,
                  type_name=".tensorflow.TensorShapeProto.Dim")
    msg.field.add(name="unknown_rank", number=3, label=F.LABEL_OPTIONAL, type=F.TYPE_BOOL)
    tensor = descriptor_pb2.FileDescriptorProto(name="tensorflow/core/framework/tensor.proto", package="tensorflow",
                                                syntax="proto3", dependency=[types.name, shape.name])
    t = tensor.message_type.add(name="TensorProto")
    t.field.add(name="dtype", number=1, label=F.LABEL_OPTIONAL, type=F.TYPE_ENUM, type_name=".tensorflow.DataType")
    t.field.add(name="tensor_shape", number=2, label=F.LABEL_OPTIONAL, type=F.TYPE_MESSAGE,
                type_name=".tensorflow.TensorShapeProto")
    t.field.add(name="version_number", number=3, label=F.LABEL_OPTIONAL, type=F.TYPE_INT32)
    t.field.add(name="tensor_content", number=4, label=F.LABEL_OPTIONAL, type=F.TYPE_BYTES)
    for name, number, ftype in (("half_val", 13, F.TYPE_INT32), ("float_val", 5, F.TYPE_FLOAT),
                                ("double_val", 6, F.TYPE_DOUBLE), ("int_val", 7, F.TYPE_INT32),
                                ("string_val", 8, F.TYPE_BYTES), ("scomplex_val", 9, F.TYPE_FLOAT),
                                ("int64_val", 10, F.TYPE_INT64), ("bool_val", 11, F.TYPE_BOOL),
                                ("dcomplex_val", 12, F.TYPE_DOUBLE), ("uint32_val", 16, F.TYPE_UINT32),
                                ("uint64_val", 17, F.TYPE_UINT64)):
        f = t.field.add(name=name, number=number, label=F.LABEL_REPEATED, type=ftype)
        if ftype != F.TYPE_BYTES:
            f.options.packed = True
    pool = descriptor_pool.DescriptorPool()
    for file in (types, shape, tensor):
        pool.Add(file)
    return _Classes(message_factory.GetMessageClass(pool.FindMessageTypeByName("tensorflow.TensorProto")),
                    message_factory.GetMessageClass(pool.FindMessageTypeByName("tensorflow.TensorShapeProto")))


def _host_value(tensor: Any) -> "tuple[str, np.ndarray]":
    """``(dtype name, host array)`` of what ``serialize_tensor`` was given."""
    if isinstance(tensor, (bytes, str)) or (isinstance(tensor, np.ndarray) and tensor.dtype.kind in "OSU"):
        return "string", host_strings(tensor, "tf.io.serialize_tensor", "tensor")
    t = tensor if isinstance(tensor, Tensor) else convert_to_tensor(tensor)
    host_strings_error = None
    try:
        a = np.asarray(t.numpy())
    except Exception as e:  # noqa: BLE001 - a traced value: the host-string error says where to call it
        host_strings_error = e
    if host_strings_error is not None:
        host_strings(t, "tf.io.serialize_tensor", "tensor")   # (raises TracedStringError)
        raise host_strings_error
    return _dtypes.as_dtype(a.dtype).name, a


def serialize_tensor(tensor: Any, name: Optional[str] = None) -> bytes:
    """``tf.io.serialize_tensor``: ``tensor`` as TensorProto bytes (a scalar string: ``bytes``)."""
    dtype, a = _host_value(tensor)
    if dtype not in DATA_TYPES:
        raise TypeError(f"tf.io.serialize_tensor: dtype {dtype} has no TensorProto type here.")
    proto = classes().TensorProto(dtype=DATA_TYPES[dtype])
    proto.tensor_shape.SetInParent()   # (a scalar's empty shape is written, as TF's)
    for d in a.shape:
        proto.tensor_shape.dim.add(size=int(d))
    if dtype == "string":
        proto.string_val.extend(bytes(v) for v in a.reshape(-1))
    elif a.size:
        proto.tensor_content = np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
    return proto.SerializeToString()


def _short(name: str) -> str:
    return _SHORT.get(name, name)


def parse_tensor(serialized: Any, out_type: Any, name: Optional[str] = None) -> Any:
    """``tf.io.parse_tensor``: TensorProto bytes (a scalar string) as a Tensor of ``out_type``
    (``"string"``: host strings)."""
    want = "string" if (out_type == "string" or getattr(out_type, "name", None) == "string") else \
        _dtypes.as_dtype(out_type).name
    a = host_strings(serialized, "tf.io.parse_tensor", "serialized")
    if a.ndim != 0:
        raise InvalidArgumentError(None, None, f"Expected `serialized` to be a scalar, got shape: "
                                   f"[{','.join(str(d) for d in a.shape)}]")
    proto = classes().TensorProto()
    try:
        proto.ParseFromString(bytes(a[()]))
    except Exception:  # noqa: BLE001 - protobuf's DecodeError (and upb's variants)
        raise InvalidArgumentError(None, None, "Could not parse `serialized` as TensorProto.") from None
    got = _NAMES.get(proto.dtype)
    if got is None:
        raise InvalidArgumentError(None, None, f"Cannot parse tensor from proto: dtype number {proto.dtype} is not "
                                   "one tapejax has.")
    if got != want:
        raise InvalidArgumentError(None, None, f"Type mismatch between parsed tensor ({_short(got)}) and dtype "
                                   f"({_short(want)})")
    shape = tuple(int(d.size) for d in proto.tensor_shape.dim)
    n = int(np.prod(shape, dtype=np.int64))
    if got == "string":
        values = list(proto.string_val)
        out = np.empty(n, object)
        out[:] = (values + [values[-1] if values else b""] * n)[:n]
        return host_result(out.reshape(shape))
    np_dtype = np.dtype(_dtypes.as_dtype(got)._np)
    if proto.tensor_content:
        if len(proto.tensor_content) != n * np_dtype.itemsize:
            raise InvalidArgumentError(None, None, f"Cannot parse tensor from proto: tensor_content holds "
                                       f"{len(proto.tensor_content)} bytes, shape {list(shape)} of {got} needs "
                                       f"{n * np_dtype.itemsize}.")
        values = np.frombuffer(proto.tensor_content, np_dtype.newbyteorder("<")).astype(np_dtype)
    else:
        raw = list(getattr(proto, _VAL_FIELDS[got]))
        if got in ("complex64", "complex128"):
            raw = [complex(r, i) for r, i in zip(raw[::2], raw[1::2])]
        if got in ("float16", "bfloat16"):
            values = np.asarray(raw, np.uint16).view(np_dtype)
        else:
            values = np.asarray(raw, np_dtype)
        if values.size < n:
            fill = values[-1] if values.size else np.zeros((), np_dtype)
            values = np.concatenate([values, np.full(n - values.size, fill, np_dtype)])
        values = values[:n]
    store = _dtypes.storage_dtype(np_dtype, "out_type")
    values = values.reshape(shape)
    return numeric_result(values if store == np_dtype else values.astype(store))


__all__ = ["DATA_TYPES", "classes", "parse_tensor", "serialize_tensor"]
