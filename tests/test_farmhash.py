"""``tapejax.ops.farmhash.fingerprint64`` against TF's FarmHash (``to_hash_bucket_fast`` with
2**63 - 1 buckets keeps 63 of the 64 bits) on random bytes of every length from 0 to 300 and a few
long ones: every branch of the algorithm (0-3, 4-7, 8-16, 17-32, 33-64, over 64 bytes, the loop
run once and several times)."""
import random

import pytest

from tapejax.ops.farmhash import fingerprint64


def test_fingerprint64_equals_tfs_on_every_length():
    tf = pytest.importorskip("tensorflow")
    rng = random.Random(1)
    data = [bytes(rng.randrange(256) for _ in range(n)) for n in list(range(301)) + [511, 512, 513, 1000, 4097]]
    n = 2**63 - 1
    want = tf.strings.to_hash_bucket_fast(tf.constant(data), n).numpy().tolist()
    got = [fingerprint64(d) % n for d in data]
    assert got == want


def test_fingerprint64_known_values():
    """Values TF 2.21 gives (``tf.fingerprint`` of the strings, little-endian), kept here so the
    test has an oracle without TF."""
    assert fingerprint64(b"ab").to_bytes(8, "little") == bytes([30, 165, 173, 66, 82, 110, 141, 170])
    assert fingerprint64(b"c").to_bytes(8, "little") == bytes([40, 123, 203, 224, 169, 24, 161, 158])
    assert fingerprint64(b"") == 0x9AE16A3B2F90404F


def test_tf_hash64_and_siphash_equal_tfs():
    """TF's legacy ``Hash64`` (``to_hash_bucket``) and SipHash-2-4 (``to_hash_bucket_strong``) on
    every tail length (0-7 bytes after whole 8-byte words) and longer strings."""
    tf = pytest.importorskip("tensorflow")
    from tapejax.ops.farmhash import siphash24, tf_hash64
    rng = random.Random(2)
    data = [bytes(rng.randrange(256) for _ in range(n)) for n in list(range(80)) + [255, 1024]]
    n = 2**63 - 1
    assert [tf_hash64(d) % n for d in data] == tf.strings.to_hash_bucket(tf.constant(data), n).numpy().tolist()
    key = [2**40 + 3, 987654321]
    assert [siphash24((key[0], key[1]), d) % n for d in data] == \
        tf.strings.to_hash_bucket_strong(tf.constant(data), n, key).numpy().tolist()
