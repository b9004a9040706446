"""FarmHash's ``Fingerprint64`` (``farmhashna::Hash64``), the hash TF's string bucketing uses
(``tf.strings.to_hash_bucket_fast``, ``tf.lookup.StaticVocabularyTable``'s out-of-vocabulary
buckets, ``tf.fingerprint``).  No maintained Python package on the index here provides it, so it
is written out from FarmHash's published algorithm (Google's farmhash, MIT licence) and checked
against TF on strings of every length class (0-16, 17-32, 33-64 and longer bytes).

Beside it: TF's ``FingerprintCat64`` (feature crosses), its legacy ``Hash64`` and SipHash-2-4 (the
keyed bucketing).  Python integers are unbounded: every step that would wrap in C is masked to 64
bits.
"""
from typing import Tuple

_M = (1 << 64) - 1
K0 = 0xC3A5C85C97CB3127
K1 = 0xB492B66FBE98F273
K2 = 0x9AE16A3B2F90404F


def _fetch64(s: bytes, i: int) -> int:
    return int.from_bytes(s[i:i + 8], "little")


def _fetch32(s: bytes, i: int) -> int:
    return int.from_bytes(s[i:i + 4], "little")


def _rotate(v: int, shift: int) -> int:
    return v if shift == 0 else ((v >> shift) | (v << (64 - shift))) & _M


def _shift_mix(v: int) -> int:
    return v ^ (v >> 47)


def _hash_len16(u: int, v: int, mul: int) -> int:
    a = ((u ^ v) * mul) & _M
    a ^= a >> 47
    b = ((v ^ a) * mul) & _M
    b ^= b >> 47
    return (b * mul) & _M


def _len0to16(s: bytes, n: int) -> int:
    if n >= 8:
        mul = (K2 + n * 2) & _M
        a = (_fetch64(s, 0) + K2) & _M
        b = _fetch64(s, n - 8)
        c = (_rotate(b, 37) * mul + a) & _M
        d = ((_rotate(a, 25) + b) * mul) & _M
        return _hash_len16(c, d, mul)
    if n >= 4:
        mul = (K2 + n * 2) & _M
        a = _fetch32(s, 0)
        return _hash_len16((n + (a << 3)) & _M, _fetch32(s, n - 4), mul)
    if n > 0:
        y = s[0] + (s[n >> 1] << 8)
        z = n + (s[n - 1] << 2)
        return (_shift_mix(((y * K2) & _M) ^ ((z * K0) & _M)) * K2) & _M
    return K2


def _len17to32(s: bytes, n: int) -> int:
    mul = (K2 + n * 2) & _M
    a = (_fetch64(s, 0) * K1) & _M
    b = _fetch64(s, 8)
    c = (_fetch64(s, n - 8) * mul) & _M
    d = (_fetch64(s, n - 16) * K2) & _M
    return _hash_len16((_rotate((a + b) & _M, 43) + _rotate(c, 30) + d) & _M,
                       (a + _rotate((b + K2) & _M, 18) + c) & _M, mul)


def _len33to64(s: bytes, n: int) -> int:
    mul = (K2 + n * 2) & _M
    a = (_fetch64(s, 0) * K2) & _M
    b = _fetch64(s, 8)
    c = (_fetch64(s, n - 8) * mul) & _M
    d = (_fetch64(s, n - 16) * K2) & _M
    y = (_rotate((a + b) & _M, 43) + _rotate(c, 30) + d) & _M
    z = _hash_len16(y, (a + _rotate((b + K2) & _M, 18) + c) & _M, mul)
    e = (_fetch64(s, 16) * mul) & _M
    f = _fetch64(s, 24)
    g = ((y + _fetch64(s, n - 32)) * mul) & _M
    h = ((z + _fetch64(s, n - 24)) * mul) & _M
    return _hash_len16((_rotate((e + f) & _M, 43) + _rotate(g, 30) + h) & _M,
                       (e + _rotate((f + a) & _M, 18) + g) & _M, mul)


def _weak32(s: bytes, i: int, a: int, b: int) -> Tuple[int, int]:
    w, x, y, z = _fetch64(s, i), _fetch64(s, i + 8), _fetch64(s, i + 16), _fetch64(s, i + 24)
    a = (a + w) & _M
    b = _rotate((b + a + z) & _M, 21)
    c = a
    a = (a + x + y) & _M
    b = (b + _rotate(a, 44)) & _M
    return (a + z) & _M, (b + c) & _M


def fingerprint64(s: bytes) -> int:
    """FarmHash ``Fingerprint64`` of ``s`` (an unsigned 64-bit integer)."""
    n = len(s)
    if n <= 16:
        return _len0to16(s, n)
    if n <= 32:
        return _len17to32(s, n)
    if n <= 64:
        return _len33to64(s, n)
    seed = 81
    x = seed
    y = (seed * K1 + 113) & _M
    z = (_shift_mix((y * K2 + 113) & _M) * K2) & _M
    v0 = v1 = w0 = w1 = 0
    x = (x * K2 + _fetch64(s, 0)) & _M
    end = ((n - 1) // 64) * 64
    last64 = end + ((n - 1) & 63) - 63
    i = 0
    while True:
        x = (_rotate((x + y + v0 + _fetch64(s, i + 8)) & _M, 37) * K1) & _M
        y = (_rotate((y + v1 + _fetch64(s, i + 48)) & _M, 42) * K1) & _M
        x ^= w1
        y = (y + v0 + _fetch64(s, i + 40)) & _M
        z = (_rotate((z + w0) & _M, 33) * K1) & _M
        v0, v1 = _weak32(s, i, (v1 * K1) & _M, (x + w0) & _M)
        w0, w1 = _weak32(s, i + 32, (z + w1) & _M, (y + _fetch64(s, i + 16)) & _M)
        z, x = x, z
        i += 64
        if i == end:
            break
    mul = (K1 + ((z & 0xFF) << 1)) & _M
    i = last64
    w0 = (w0 + ((n - 1) & 63)) & _M
    v0 = (v0 + w0) & _M
    w0 = (w0 + v0) & _M
    x = (_rotate((x + y + v0 + _fetch64(s, i + 8)) & _M, 37) * mul) & _M
    y = (_rotate((y + v1 + _fetch64(s, i + 48)) & _M, 42) * mul) & _M
    x ^= (w1 * 9) & _M
    y = (y + v0 * 9 + _fetch64(s, i + 40)) & _M
    z = (_rotate((z + w0) & _M, 33) * mul) & _M
    v0, v1 = _weak32(s, i, (v1 * mul) & _M, (x + w0) & _M)
    w0, w1 = _weak32(s, i + 32, (z + w1) & _M, (y + _fetch64(s, i + 16)) & _M)
    z, x = x, z
    return _hash_len16((_hash_len16(v0, w0, mul) + _shift_mix(y) * K0 + z) & _M,
                       (_hash_len16(v1, w1, mul) + x) & _M, mul)





def tf_hash64(s: bytes, seed: int = 0xDECAFCAFFE) -> int:
    """TensorFlow's own ``Hash64`` (a MurmurHash2-64A; ``tf.strings.to_hash_bucket``'s)."""
    m, r = 0xC6A4A7935BD1E995, 47
    n = len(s)
    h = (seed ^ (n * m)) & _M
    i = 0
    while n - i >= 8:
        k = (_fetch64(s, i) * m) & _M
        k ^= k >> r
        k = (k * m) & _M
        h = ((h ^ k) * m) & _M
        i += 8
    rest = n - i
    if rest:
        for j in range(rest - 1, -1, -1):
            h ^= s[i + j] << (8 * j)
        h = (h * m) & _M
    h ^= h >> r
    h = (h * m) & _M
    h ^= h >> r
    return h


def siphash24(key: Tuple[int, int], s: bytes) -> int:
    """SipHash-2-4 of ``s`` under the 128-bit key ``(k0, k1)`` (``tf.strings.to_hash_bucket_strong``'s
    ``StrongKeyedHash``)."""
    k0, k1 = key[0] & _M, key[1] & _M
    v0, v1 = k0 ^ 0x736F6D6570736575, k1 ^ 0x646F72616E646F6D
    v2, v3 = k0 ^ 0x6C7967656E657261, k1 ^ 0x7465646279746573

    def rounds(v0: int, v1: int, v2: int, v3: int, n: int) -> Tuple[int, int, int, int]:
        for _ in range(n):
            v0 = (v0 + v1) & _M
            v1 = ((v1 << 13) | (v1 >> 51)) & _M
            v1 ^= v0
            v0 = ((v0 << 32) | (v0 >> 32)) & _M
            v2 = (v2 + v3) & _M
            v3 = ((v3 << 16) | (v3 >> 48)) & _M
            v3 ^= v2
            v0 = (v0 + v3) & _M
            v3 = ((v3 << 21) | (v3 >> 43)) & _M
            v3 ^= v0
            v2 = (v2 + v1) & _M
            v1 = ((v1 << 17) | (v1 >> 47)) & _M
            v1 ^= v2
            v2 = ((v2 << 32) | (v2 >> 32)) & _M
        return v0, v1, v2, v3

    n = len(s)
    full = n - n % 8
    for i in range(0, full, 8):
        m = _fetch64(s, i)
        v3 ^= m
        v0, v1, v2, v3 = rounds(v0, v1, v2, v3, 2)
        v0 ^= m
    last = ((n & 0xFF) << 56) | int.from_bytes(s[full:], "little")
    v3 ^= last
    v0, v1, v2, v3 = rounds(v0, v1, v2, v3, 2)
    v0 ^= last
    v2 ^= 0xFF
    v0, v1, v2, v3 = rounds(v0, v1, v2, v3, 4)
    return v0 ^ v1 ^ v2 ^ v3
def fingerprint_cat64(fp1: int, fp2: int) -> int:
    """TF's ``FingerprintCat64``: two fingerprints combined (``tf.sparse.cross_hashed``)."""
    mul = 0xC6A4A7935BD1E995
    result = fp1 ^ mul
    result ^= (_shift_mix((fp2 * mul) & _M) * mul) & _M
    result = (result * mul) & _M
    result = (_shift_mix(result) * mul) & _M
    return _shift_mix(result)


__all__ = ["fingerprint64", "fingerprint_cat64", "siphash24", "tf_hash64"]
