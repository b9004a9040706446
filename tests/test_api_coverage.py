"""TF 2.21's public names per namespace against tapejax's: every name tapejax lacks is listed here
with the reason it is missing, and the test fails when the lists and tapejax disagree (a gap not
listed, or a listed name tapejax now has).

The TF names come from ``tests/data/tf_api_names.json`` (``python tools/tf_api_names.py`` writes it
from the installed TF: ``dir()`` of each namespace, ``tf.keras`` being tf_keras). A name counts as
present when ``getattr`` on tapejax's namespace returns it; a name of a type with no JAX
representation raises ``UnsupportedError`` there (checked below), so it counts as missing.

``PYTHONPATH=. python tests/test_api_coverage.py`` prints the table: per namespace, TF's count, tapejax's and
the missing names by reason.
"""
import importlib.metadata
import importlib.util
import json
import os

import pytest

import tapejax as tf
from tapejax.ops.unsupported import UnsupportedError

DATA = os.path.join(os.path.dirname(__file__), "data", "tf_api_names.json")
with open(DATA) as _f:
    SNAPSHOT = json.load(_f)
TF_NAMES: "dict[str, list[str]]" = SNAPSHOT["namespaces"]

#: Why a TF name is missing from tapejax.
REASONS = {
    "strings": "no JAX representation: string tensors (XLA has no string type); tf.strings' basic ops run on "
               "host bytes (tapejax.data.hostops), its other names raise UnsupportedError naming what to use instead",
    "sparse": "not yet: the sparse ops beyond tf.sparse's core (tapejax.ops.sparse_ops): set ops, edit "
              "distance, sparse embedding lookups",
    "resource": "no JAX representation: resource and variant handles (CriticalSection, lookup "
                "tables, queues)",
    "quantized": "no JAX representation: TF's quantized dtypes (qint8 ...) and their ops",
    "graph": "out of scope: TF's graph machinery (Graph, Operation, GraphDef import, raw_ops, custom-op "
             "libraries, graph batching); tapejax compiles with jax.jit",
    "proto": "out of scope: TF's protocol buffers beyond tf.train.Example and serialize_tensor's TensorProto "
             "(TensorProto objects, model protos, generic proto codecs): data "
             "formats, not computation",
    "distributed": "out of scope: TF's distributed runtime (cluster specs, servers, coordinators); JAX's is "
                   "jax.distributed",
    "subsystem": "out of scope: a TF library beside the tape (io, dtensor, "
                 "tpu, xla, lite, profiler, feature_column, build and version info, pinned-memory checks)",
    "keras_alias": "out of scope: Keras-2 names re-exported by TF (losses, metrics, initializers, RNN cell "
                   "wrappers): use tapejax.keras",
    "typespec": "out of scope: composite-tensor type specs (TypeSpec and the specs of the types above)",
    "experimental": "out of scope: TF's unstable experimental namespace",
    "one_program": "not applicable: a strategy here runs one SPMD program, so a value of strategy.run is its global "
                   "value, never a per-replica container (tapejax/distribute/README.md)",
    "tf1": "out of scope: TF1's graph and session API (sessions, placeholders, collections, variable "
           "scopes); tapejax.compat.v1 keeps the gradient names TF2 code uses from it",
}

#: namespace -> reason -> the missing names (space separated).  compat.v1 is handled by rule below.
MISSING = {
    "": {
        "resource": "CriticalSection queue resource variant",
        "quantized": "qint16 qint32 qint8 quint16 quint8",
        "graph": "Graph Operation import_graph_def graph_util raw_ops load_library load_op_library mlir "
                 "nondifferentiable_batch_function",
        "proto": "make_ndarray make_tensor_proto",
        "subsystem": "dtensor tpu xla lite profiler feature_column security "
                     "sysconfig tools version types check_pinned",
        "keras_alias": "initializers losses metrics",
        "typespec": "IndexedSlicesSpec NoneTensorSpec OptionalSpec TypeSpec",
    },
    "math": {},
    "nn": {
        "keras_alias": "RNNCellDeviceWrapper RNNCellDropoutWrapper RNNCellResidualWrapper",
        "experimental": "experimental",
    },
    "linalg": {
        "experimental": "experimental",
    },
    "random": {"experimental": "experimental"},
    "keras.optimizers": {"experimental": "experimental"},
    "train": {
        "distributed": "ClusterDef ClusterSpec JobDef ServerDef Coordinator",
        "experimental": "experimental",
    },
    "autodiff": {},
    "nest": {},
    "signal": {},
    "bitwise": {},
    "distribute": {
        "distributed": "MultiWorkerMirroredStrategy ParameterServerStrategy Server TPUStrategy cluster_resolver "
                       "coordinator",
        "one_program": "DistributedValues",
        "experimental": "experimental",
    },
    "dtypes": {
        "resource": "resource variant",
        "quantized": "QUANTIZED_DTYPES qint16 qint32 qint8 quint16 quint8",
        "experimental": "experimental",
    },
}



def _namespace(ns: str):
    mod = tf
    for part in ns.split(".") if ns else ():
        mod = getattr(mod, part)
    return mod


def _has(mod, name: str) -> bool:
    try:
        getattr(mod, name)
    except AttributeError:   # (UnsupportedError is one)
        return False
    return True


def missing(ns: str) -> "set[str]":
    """TF's names in ``ns`` that tapejax's namespace lacks."""
    mod = _namespace(ns)
    return {n for n in TF_NAMES[ns] if not _has(mod, n)}


def declared(ns: str) -> "dict[str, str]":
    """name -> reason, as listed in ``MISSING`` (compat.v1: every missing name is TF1's API)."""
    if ns == "compat.v1":
        return {n: "tf1" for n in missing(ns)}
    return {n: reason for reason, names in MISSING[ns].items() for n in names.split()}


def table() -> "list[tuple[str, int, int, dict[str, int]]]":
    """Per namespace: (name, TF's count, tapejax has, missing count per reason)."""
    rows = []
    for ns in TF_NAMES:
        why = declared(ns)
        counts: "dict[str, int]" = {}
        for reason in why.values():
            counts[reason] = counts.get(reason, 0) + 1
        rows.append((ns or "(top level)", len(TF_NAMES[ns]), len(TF_NAMES[ns]) - len(why), counts))
    return rows


def test_snapshot_is_tf_2_21_and_matches_installed_tf():
    assert SNAPSHOT["version"].startswith("2.21")
    if importlib.util.find_spec("tensorflow") is not None:
        installed = {d.metadata["Name"]: d.version for d in importlib.metadata.distributions()
                     if d.metadata["Name"] in ("tensorflow", "tensorflow-cpu")}
        assert SNAPSHOT["version"] in installed.values(), (SNAPSHOT["version"], installed)


def test_every_namespace_is_compared():
    assert set(TF_NAMES) == set(MISSING) | {"compat.v1"}
    for ns in ("", "math", "nn", "linalg", "random", "keras.optimizers", "train", "autodiff", "nest", "compat.v1",
               "signal", "distribute"):
        assert ns in TF_NAMES


@pytest.mark.parametrize("ns", sorted(MISSING))
def test_missing_names_are_the_listed_ones(ns):
    """A gap not listed, or a listed name tapejax now has (or TF never had), fails."""
    why = declared(ns)
    assert set(why) <= set(TF_NAMES[ns]), f"listed but not in TF's tf.{ns}: {sorted(set(why) - set(TF_NAMES[ns]))}"
    gaps = missing(ns)
    assert not gaps - set(why), f"tf.{ns} lacks names with no reason given: {sorted(gaps - set(why))}"
    assert not set(why) - gaps, f"tf.{ns} has names listed as missing: {sorted(set(why) - gaps)}"
    assert set(why.values()) <= set(REASONS)


def test_compat_v1_names_are_tfs():
    """tapejax.compat.v1 is a subset of TF's (the rest is TF1's API: REASONS['tf1'])."""
    # (gradient_override_map is TF's Graph method, get_default_graph().gradient_override_map; tapejax
    # also offers it as a function there)
    ours = {n for n in dir(tf.compat.v1) if not n.startswith("_")} - {"gradient_override_map"}
    assert ours and ours <= set(TF_NAMES["compat.v1"]), sorted(ours - set(TF_NAMES["compat.v1"]))


def test_ragged_types_are_top_level_names():
    """tf.RaggedTensor / tf.RaggedTensorSpec are tapejax's types (tapejax.ops.ragged_tensor), and
    another unknown top-level name is an AttributeError."""
    from tapejax.ops.ragged_tensor import RaggedTensor, RaggedTensorSpec
    assert tf.RaggedTensor is RaggedTensor and tf.RaggedTensorSpec is RaggedTensorSpec
    with pytest.raises(AttributeError, match="no attribute 'NoSuchName'"):
        getattr(tf, "NoSuchName")


@pytest.mark.parametrize("ns,name,alternative", [
    ("strings", "unicode_normalize", "integer ids"), ("strings", "no_such_op", "integer ids"),
])
def test_unsupported_namespaces_raise_one_clear_error(ns, name, alternative):
    """Any name in tf.strings tapejax lacks (it has all of TF 2.21's; these are not TF's)
    raises UnsupportedError naming the alternative."""
    mod = getattr(tf, ns)
    with pytest.raises(UnsupportedError, match=f"tf.{ns}.{name}: tapejax has no") as e:
        getattr(mod, name)
    assert alternative in str(e.value)


def test_string_tensors_raise_naming_the_alternative():
    with pytest.raises(TypeError, match="no string or object tensors.*integer ids"):
        tf.constant(["a", "b"])
    x = tf.constant(1.0)
    with pytest.raises(TypeError, match="no string tensors"):
        x.__mul__("a")
    # ``tf.string`` names host string data (tf.data, parse_example specs); no Tensor holds it
    assert tf.string.name == "string" and tf.as_dtype("string") is tf.string and not tf.string.is_numeric
    for make in (lambda: tf.zeros([2], tf.string), lambda: tf.cast(x, tf.string), lambda: tf.ones([1], "string")):
        with pytest.raises(TypeError, match="no string tensors.*tf.string names host string data"):
            make()


def test_reasons_are_all_used():
    """Every reason explains a missing name (of a namespace, tf.io or tf.image)."""
    used = {r for ns in TF_NAMES for r in declared(ns).values()} | set(IO_MISSING.values()) | set(IMAGE_MISSING.values())
    assert set(REASONS) <= used


if __name__ == "__main__":
    total = [0, 0]
    for ns, n_tf, n_have, counts in table():
        total[0] += n_tf
        total[1] += n_have
        print(f"{ns:18} TF {n_tf:4}  tapejax {n_have:4}  missing {n_tf - n_have:4}  "
              + ", ".join(f"{r} {c}" for r, c in sorted(counts.items())))
    print(f"{'all':18} TF {total[0]:4}  tapejax {total[1]:4}  missing {total[0] - total[1]:4}")


#: TF 2.21's public ``tf.data.Dataset`` names (``dir``), and those tapejax.data lacks, with the reason.
TF_DATASET = ("apply as_numpy_iterator batch bucket_by_sequence_length cache cardinality choose_from_datasets "
              "concatenate counter element_spec enumerate filter fingerprint flat_map from_generator "
              "from_tensor_slices from_tensors get_single_element group_by_window ignore_errors interleave "
              "list_files load map options padded_batch prefetch ragged_batch random range rebatch reduce "
              "rejection_resample repeat sample_from_datasets save scan shard shuffle skip snapshot sparse_batch "
              "take take_while unbatch unique window with_options zip").split()
DATASET_MISSING = {"sparse_batch": "sparse"}


def test_dataset_methods_missing_are_the_listed_ones():
    ours = {n for n in dir(tf.data.Dataset) if not n.startswith("_")}
    assert {n for n in TF_DATASET if n not in ours} == set(DATASET_MISSING)
    assert all(reason in REASONS for reason in DATASET_MISSING.values())


#: TF 2.21's ``tf.data``, ``tf.data.experimental`` and iterator names (``dir``) tapejax lacks, with the reason.
TF_DATA = ("AUTOTUNE Dataset DatasetSpec FixedLengthRecordDataset INFINITE_CARDINALITY Iterator IteratorSpec "
           "NumpyIterator Options TFRecordDataset TextLineDataset ThreadingOptions UNKNOWN_CARDINALITY "
           "experimental").split()
DATA_MISSING: "dict[str, str]" = {}
TF_DATA_EXPERIMENTAL = (
    "AUTOTUNE AutoShardPolicy AutotuneAlgorithm AutotuneOptions Counter CsvDataset DatasetInitializer "
    "DistributeOptions ExternalStatePolicy INFINITE_CARDINALITY OptimizationOptions Optional RandomDataset Reducer "
    "SHARD_HINT ServiceOptions SqlDataset TFRecordWriter ThreadingOptions UNKNOWN_CARDINALITY assert_cardinality at "
    "bucket_by_sequence_length cardinality choose_from_datasets copy_to_device dense_to_ragged_batch "
    "dense_to_sparse_batch distributed_save enable_debug_mode enumerate_dataset from_list from_variant "
    "get_model_proto get_next_as_optional get_single_element get_structure group_by_reducer group_by_window "
    "ignore_errors index_table_from_dataset load make_batched_features_dataset make_csv_dataset "
    "make_saveable_from_iterator map_and_batch pad_to_cardinality parallel_interleave parse_example_dataset "
    "prefetch_to_device rejection_resample sample_from_datasets save scan service shuffle_and_repeat snapshot "
    "table_from_dataset take_while to_variant unbatch unique").split()
DATA_EXPERIMENTAL_MISSING = {
    "DatasetInitializer": "resource", "index_table_from_dataset": "resource", "table_from_dataset": "resource",
    "from_variant": "resource", "to_variant": "resource",
    "dense_to_sparse_batch": "sparse", "SqlDataset": "subsystem",
    "get_model_proto": "proto",
    "ServiceOptions": "distributed", "service": "distributed", "distributed_save": "distributed",
    "make_saveable_from_iterator": "tf1"}
TF_ITERATOR = "element_spec get_next get_next_as_optional next output_classes output_shapes output_types".split()


@pytest.mark.parametrize("ns,names,missing_", [
    ("data", TF_DATA, DATA_MISSING), ("data.experimental", TF_DATA_EXPERIMENTAL, DATA_EXPERIMENTAL_MISSING),
    ("data.Iterator", TF_ITERATOR, {})])
def test_data_names_missing_are_the_listed_ones(ns, names, missing_):
    mod = _namespace(ns)
    assert {n for n in names if not _has(mod, n)} == set(missing_)
    assert all(reason in REASONS for reason in missing_.values())


def test_tf_experimental_has_optional_only():
    assert tf.experimental.Optional is tf.data.experimental.Optional


#: TF 2.21's ``tf.image`` names (``dir``), and those tapejax lacks, with the reason.
TF_IMAGE = (
    "ResizeMethod adjust_brightness adjust_contrast adjust_gamma adjust_hue adjust_jpeg_quality adjust_saturation "
    "central_crop combined_non_max_suppression convert_image_dtype crop_and_resize crop_to_bounding_box "
    "decode_and_crop_jpeg decode_bmp decode_gif decode_image decode_jpeg decode_jxl decode_png decode_webp "
    "draw_bounding_boxes encode_jpeg encode_png extract_glimpse extract_jpeg_shape extract_patches flip_left_right "
    "flip_up_down generate_bounding_box_proposals grayscale_to_rgb hsv_to_rgb image_gradients is_jpeg "
    "non_max_suppression non_max_suppression_overlaps non_max_suppression_padded non_max_suppression_with_scores "
    "pad_to_bounding_box per_image_standardization psnr random_brightness random_contrast random_crop "
    "random_flip_left_right random_flip_up_down random_hue random_jpeg_quality random_saturation resize "
    "resize_with_crop_or_pad resize_with_pad rgb_to_grayscale rgb_to_hsv rgb_to_yiq rgb_to_yuv rot90 "
    "sample_distorted_bounding_box sobel_edges ssim ssim_multiscale stateless_random_brightness "
    "stateless_random_contrast stateless_random_crop stateless_random_flip_left_right "
    "stateless_random_flip_up_down stateless_random_hue stateless_random_jpeg_quality stateless_random_saturation "
    "stateless_sample_distorted_bounding_box total_variation transpose yiq_to_rgb yuv_to_rgb").split()
#: The PNG / JPEG / GIF / BMP codecs are here, on host strings (tapejax.data.image_codecs); the
#: WebP / JPEG XL and the JPEG-quality augmentations are not; box proposals are not written yet.
IMAGE_MISSING = {
    **{n: "strings" for n in (
        "adjust_jpeg_quality decode_jxl decode_webp random_jpeg_quality "
        "stateless_random_jpeg_quality").split()},
    **{n: "not_yet" for n in (
        "generate_bounding_box_proposals").split()}}
IMAGE_REASONS = {"not_yet": "not written yet: box proposals, which TF 2.21 runs on GPUs only (its CPU build has no "
                            "kernel: NotFoundError), so no CPU oracle; the other box ops are in "
                            "tapejax/ops/image_boxes.py, image_nms.py, image_sample.py"}


def test_image_names_missing_are_the_listed_ones():
    """tf.image: PNG / JPEG / GIF / BMP codecs on host strings; WebP, JPEG XL and the
    JPEG-quality augmentations not (REASONS['strings']); box proposals are still to do."""
    assert {n for n in TF_IMAGE if not _has(tf.image, n)} == set(IMAGE_MISSING)
    assert all(r in REASONS or r in IMAGE_REASONS for r in IMAGE_MISSING.values())
    ours = {n for n in dir(tf.image) if not n.startswith("_")}
    assert ours <= set(TF_IMAGE), sorted(ours - set(TF_IMAGE))


#: TF 2.21's ``tf.io`` names (``dir``), and those tapejax lacks, with the reason.
TF_IO = (
    "FixedLenFeature FixedLenSequenceFeature RaggedFeature SparseFeature TFRecordOptions TFRecordWriter VarLenFeature "
    "decode_and_crop_jpeg decode_base64 decode_bmp decode_compressed decode_csv decode_gif decode_image decode_jpeg "
    "decode_json_example decode_jxl decode_png decode_proto decode_raw decode_webp deserialize_many_sparse "
    "encode_base64 encode_jpeg encode_png encode_proto extract_jpeg_shape gfile is_jpeg match_filenames_once "
    "matching_files parse_example parse_sequence_example parse_single_example parse_single_sequence_example "
    "parse_tensor read_file serialize_many_sparse serialize_sparse serialize_tensor write_file write_graph").split()
IO_MISSING = {
    **{n: "strings" for n in (
        "decode_json_example decode_jxl decode_webp").split()},
    **{n: "sparse" for n in "deserialize_many_sparse serialize_many_sparse serialize_sparse".split()},
    **{n: "proto" for n in (
        "decode_proto encode_proto").split()},
    "write_graph": "graph",
    "match_filenames_once": "tf1"}


def test_io_names_missing_are_the_listed_ones():
    """tf.io: TFRecord files, Example parsing, the host decoders, read_file / write_file, the
    PNG / JPEG / GIF / BMP codecs, gfile and matching_files are here (tapejax.data)."""
    assert {n for n in TF_IO if not _has(tf.io, n)} == set(IO_MISSING)
    assert all(r in REASONS for r in IO_MISSING.values())
    ours = {n for n in dir(tf.io) if not n.startswith("_")}
    assert ours <= set(TF_IO), sorted(ours - set(TF_IO))


#: TF 2.21's ``tf.ragged`` and ``tf.RaggedTensor`` public names (``dir``), and those tapejax lacks.
TF_RAGGED = ("boolean_mask constant cross cross_hashed map_flat_values range row_splits_to_segment_ids "
             "segment_ids_to_row_splits stack stack_dynamic_partitions").split()
RAGGED_MISSING = {"cross": "strings"}
TF_RAGGED_TENSOR = (
    "bounding_shape consumers dtype flat_values from_nested_row_lengths from_nested_row_splits "
    "from_nested_value_rowids from_row_lengths from_row_limits from_row_splits from_row_starts from_sparse "
    "from_tensor from_uniform_row_length from_value_rowids get_shape merge_dims nested_row_lengths "
    "nested_row_splits nested_value_rowids nrows numpy ragged_rank row_lengths row_limits row_splits row_starts "
    "shape to_list to_sparse to_tensor uniform_row_length value_rowids values with_flat_values "
    "with_row_splits_dtype with_values").split()


def test_ragged_names_missing_are_the_listed_ones():
    assert {n for n in TF_RAGGED if not _has(tf.ragged, n)} == set(RAGGED_MISSING)
    assert all(r in REASONS for r in RAGGED_MISSING.values())
    ours = {n for n in dir(tf.ragged) if not n.startswith("_")}
    assert ours <= set(TF_RAGGED), sorted(ours - set(TF_RAGGED))
    assert [n for n in TF_RAGGED_TENSOR if not hasattr(tf.RaggedTensor, n)] == []
