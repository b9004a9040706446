"""The namespaces of the host-string ops: ``tf.io`` (``tapejax.io``), ``tf.image``, ``tf.audio``.

``tf.io`` gathers the host-string decoders (``decode``, ``byte_codecs``), files and image codecs
(``image_codecs``), TFRecord files (``tfrecord``) and ``tf.train.Example`` parsing
(``parse_example``); ``gfile`` and ``matching_files`` are TF's file-system API on the local file
system (``gfile``).  TF's other ``tf.io`` names (sparse serialization, protos ...) are not here.
``tf.image`` is ``ops``' image ops with the codecs added; ``tf.audio`` is the WAV codec
(``audio_codecs``).
"""
import sys

from ..core.modules import new_module
from ..ops.namespaces import image as _ops_image
from .audio_codecs import AUDIO_OPS
from .byte_codecs import IO_OPS as _BYTE_OPS
from .decode import decode_csv, decode_raw
from .gfile import gfile, matching_files
from .image_codecs import IMAGE_OPS, IO_OPS
from .parse_example import FixedLenFeature, FixedLenSequenceFeature, VarLenFeature
from .parse_ragged import RaggedFeature, parse_example, parse_single_example
from .parse_sequence import parse_sequence_example, parse_single_sequence_example
from .parse_sparse import SparseFeature
from .tensor_proto import parse_tensor, serialize_tensor
from .tfrecord import TFRecordOptions, TFRecordWriter

io = new_module("tapejax.io", "``tf.io``: ``decode_raw`` / ``decode_csv`` on host strings, files and image codecs (``read_file``, ``decode_png`` ...), TFRecord files "
                "(``TFRecordWriter``, ``TFRecordOptions``) and ``tf.train.Example`` parsing (``parse_example``, "
                "``parse_single_example``, the sequence forms, ``FixedLenFeature``, ``FixedLenSequenceFeature``, ``VarLenFeature``, ``SparseFeature``, ``RaggedFeature``; tapejax.data), "
                "``gfile`` and ``matching_files`` (local files).",
                {"decode_raw": decode_raw, "decode_csv": decode_csv, "TFRecordWriter": TFRecordWriter,
                 "TFRecordOptions": TFRecordOptions, "parse_example": parse_example,
                 "parse_single_example": parse_single_example, "FixedLenFeature": FixedLenFeature,
                 "FixedLenSequenceFeature": FixedLenSequenceFeature, "VarLenFeature": VarLenFeature,
                 "SparseFeature": SparseFeature, "RaggedFeature": RaggedFeature,
                 "parse_sequence_example": parse_sequence_example,
                 "parse_single_sequence_example": parse_single_sequence_example,
                 "serialize_tensor": serialize_tensor, "parse_tensor": parse_tensor, "gfile": gfile,
                 "matching_files": matching_files, **IO_OPS, **_BYTE_OPS})

#: ``tf.image``: ``ops``' image ops and the codecs (``decode_png`` ...).
image = new_module("tapejax.image", "``tf.image``: resizing, geometry, color, measures (tapejax.ops) and the "
                   "image codecs on host strings (tapejax.data.image_codecs).",
                   {**{n: getattr(_ops_image, n) for n in _ops_image.__all__}, **IMAGE_OPS})
sys.modules["tapejax.image"] = image

#: ``tf.audio``: WAV decoding and encoding on host strings.
audio = new_module("tapejax.audio", "``tf.audio``: ``decode_wav`` / ``encode_wav``, 16-bit PCM WAV on host strings "
                   "(tapejax.data.audio_codecs).", dict(AUDIO_OPS))
sys.modules["tapejax.audio"] = audio

__all__ = ["audio", "image", "io"]
