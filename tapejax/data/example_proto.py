"""``tf.train.Example`` and its parts as real protobuf messages, built from a descriptor.

TF's ``Example`` (``tensorflow/core/example/example.proto`` and ``feature.proto``) is the
record format of most TFRecord files.  Here the two ``.proto`` files are written as
``FileDescriptorProto``s in Python (``descriptor_pb2``: the same package ``tensorflow``,
message names, field numbers, types, ``packed`` options and ``oneof``), added to a
``DescriptorPool`` of our own (so they never clash with TF's generated classes when both are
imported in one process) and turned into classes with ``message_factory.GetMessageClass``.
No ``.proto`` compile step, no generated code: the classes are protobuf's own, so
``SerializeToString``, ``FromString``, ``ParseFromString``, ``CopyFrom``, ``==`` and text
format behave exactly as TF's, and equal messages serialize to the same bytes as TF's.

protobuf is optional (the ``data`` extra): the classes are built on first use
(``messages()``, or an attribute of this module: ``example_proto.Example``), and a missing
protobuf raises ImportError naming the extra.
"""
import functools
from typing import Any, NamedTuple, Tuple

_EXTRA = "the `data` extra: pip install 'tapejax[data]'"

#: field types of descriptor_pb2.FieldDescriptorProto (TYPE_* / LABEL_*), by name
_BYTES, _FLOAT, _INT64, _STRING, _MESSAGE = 12, 2, 3, 9, 11
_OPTIONAL, _REPEATED = 1, 3


class Messages(NamedTuple):
    """The message classes of ``feature.proto`` and ``example.proto``."""

    BytesList: Any
    FloatList: Any
    Int64List: Any
    Feature: Any
    Features: Any
    FeatureList: Any
    FeatureLists: Any
    Example: Any
    SequenceExample: Any


NAMES: Tuple[str, ...] = Messages._fields


def protobuf_modules() -> Any:
    try:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    except ImportError as e:   # pragma: no cover - the test install has it
        raise ImportError(f"tf.train.Example and tf.io.parse_example need protobuf ({_EXTRA}).") from e
    return descriptor_pb2, descriptor_pool, message_factory


def _message(file: Any, name: str, fields: "list[tuple[str, int, int, int, str]]", packed: bool = False,
             oneof: str = "") -> Any:
    """Add message ``name`` to ``file``: fields ``(name, number, label, type, type_name)``."""
    msg = file.message_type.add(name=name)
    if oneof:
        msg.oneof_decl.add(name=oneof)
    for fname, number, label, ftype, type_name in fields:
        f = msg.field.add(name=fname, number=number, label=label, type=ftype)
        if type_name:
            f.type_name = type_name
        if packed:
            f.options.packed = True
        if oneof:
            f.oneof_index = 0
    return msg


def _map_entry(msg: Any, entry: str, value_type: str) -> None:
    """A ``map<string, value_type>`` field's entry message nested in ``msg``."""
    nested = msg.nested_type.add(name=entry)
    nested.options.map_entry = True
    nested.field.add(name="key", number=1, label=_OPTIONAL, type=_STRING)
    nested.field.add(name="value", number=2, label=_OPTIONAL, type=_MESSAGE, type_name=value_type)


def _files(descriptor_pb2: Any) -> "tuple[Any, Any]":
    feature = descriptor_pb2.FileDescriptorProto(name="tensorflow/core/example/feature.proto", package="tensorflow",
                                                 syntax="proto3")
    _message(feature, "BytesList", [("value", 1, _REPEATED, _BYTES, "")])
    _message(feature, "FloatList", [("value", 1, _REPEATED, _FLOAT, "")], packed=True)
    _message(feature, "Int64List", [("value", 1, _REPEATED, _INT64, "")], packed=True)
    _message(feature, "Feature", [("bytes_list", 1, _OPTIONAL, _MESSAGE, ".tensorflow.BytesList"),
                                  ("float_list", 2, _OPTIONAL, _MESSAGE, ".tensorflow.FloatList"),
                                  ("int64_list", 3, _OPTIONAL, _MESSAGE, ".tensorflow.Int64List")], oneof="kind")
    features = _message(feature, "Features",
                        [("feature", 1, _REPEATED, _MESSAGE, ".tensorflow.Features.FeatureEntry")])
    _map_entry(features, "FeatureEntry", ".tensorflow.Feature")
    _message(feature, "FeatureList", [("feature", 1, _REPEATED, _MESSAGE, ".tensorflow.Feature")])
    lists = _message(feature, "FeatureLists",
                     [("feature_list", 1, _REPEATED, _MESSAGE, ".tensorflow.FeatureLists.FeatureListEntry")])
    _map_entry(lists, "FeatureListEntry", ".tensorflow.FeatureList")

    example = descriptor_pb2.FileDescriptorProto(name="tensorflow/core/example/example.proto", package="tensorflow",
                                                 syntax="proto3", dependency=[feature.name])
    _message(example, "Example", [("features", 1, _OPTIONAL, _MESSAGE, ".tensorflow.Features")])
    _message(example, "SequenceExample", [("context", 1, _OPTIONAL, _MESSAGE, ".tensorflow.Features"),
                                          ("feature_lists", 2, _OPTIONAL, _MESSAGE, ".tensorflow.FeatureLists")])
    return feature, example


@functools.lru_cache(maxsize=None)
def messages() -> Messages:
    """The message classes (built once, in a pool of their own)."""
    descriptor_pb2, descriptor_pool, message_factory = protobuf_modules()
    pool = descriptor_pool.DescriptorPool()
    for file in _files(descriptor_pb2):
        pool.Add(file)
    return Messages(*(message_factory.GetMessageClass(pool.FindMessageTypeByName(f"tensorflow.{n}"))
                      for n in NAMES))


def __getattr__(name: str) -> Any:
    if name in NAMES:
        return getattr(messages(), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Messages", "NAMES", "messages", "protobuf_modules"]
