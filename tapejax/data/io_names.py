"""``tf.io`` (``tapejax.io``): the host-string decoders (``decode``), TFRecord files
(``tfrecord``) and ``tf.train.Example`` parsing (``parse_example``), gathered as one namespace.

TF's other ``tf.io`` names (``gfile``, image codecs, sparse serialization ...) are not here.
"""
from ..core.modules import new_module
from .decode import decode_csv, decode_raw
from .parse_example import (
    FixedLenFeature,
    FixedLenSequenceFeature,
    VarLenFeature,
    parse_example,
    parse_single_example,
)
from .parse_sequence import parse_sequence_example, parse_single_sequence_example
from .tensor_proto import parse_tensor, serialize_tensor
from .tfrecord import TFRecordOptions, TFRecordWriter

io = new_module("tapejax.io", "``tf.io``: ``decode_raw`` / ``decode_csv`` on host strings, TFRecord files "
                "(``TFRecordWriter``, ``TFRecordOptions``) and ``tf.train.Example`` parsing (``parse_example``, "
                "``parse_single_example``, the sequence forms, ``FixedLenFeature``, ``FixedLenSequenceFeature``; tapejax.data).",
                {"decode_raw": decode_raw, "decode_csv": decode_csv, "TFRecordWriter": TFRecordWriter,
                 "TFRecordOptions": TFRecordOptions, "parse_example": parse_example,
                 "parse_single_example": parse_single_example, "FixedLenFeature": FixedLenFeature,
                 "FixedLenSequenceFeature": FixedLenSequenceFeature, "VarLenFeature": VarLenFeature,
                 "parse_sequence_example": parse_sequence_example,
                 "parse_single_sequence_example": parse_single_sequence_example,
                 "serialize_tensor": serialize_tensor, "parse_tensor": parse_tensor})

__all__ = ["io"]
