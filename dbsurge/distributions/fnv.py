"""FNV-1a, 64-bit: the hash YCSB uses to scatter record numbers over the key space.

The algorithm is Fowler, Noll and Vo's FNV-1a (http://www.isthe.com/chongo/tech/comp/fnv/):
start from the 64-bit offset basis, and for every octet XOR it in, then multiply by the 64-bit
FNV prime, modulo 2**64.

`fnvhash64` reproduces YCSB's ``Utils.fnvhash64(long)`` (used for ``insertorder=hashed`` keys and
by the scrambled zipfian generator): it feeds the 8 bytes of the long, low byte first (the
two's-complement little-endian encoding), through FNV-1a, reads the result as a signed 64-bit
value and returns ``Math.abs`` of it. Like Java, the one value whose absolute value does not fit
(-2**63) is returned unchanged, so the result is always in [0, 2**63) except for that 1-in-2**64 case.

    >>> hex(fnv1a_64(b""))
    '0xcbf29ce484222325'
    >>> fnvhash64(0)            # YCSB's first key is "user6284781860667377211"
    6284781860667377211
"""

from __future__ import annotations

FNV_OFFSET_BASIS_64 = 0xCBF29CE484222325
FNV_PRIME_64 = 0x100000001B3  # 1099511628211
_MASK_64 = (1 << 64) - 1
_SIGN_64 = 1 << 63


def fnv1a_64(data: bytes) -> int:
    """FNV-1a 64-bit hash of ``data`` as an unsigned integer in [0, 2**64)."""
    value = FNV_OFFSET_BASIS_64
    for octet in data:
        value = ((value ^ octet) * FNV_PRIME_64) & _MASK_64
    return value


def fnvhash64(number: int) -> int:
    """YCSB's ``Utils.fnvhash64``: FNV-1a over the 8 little-endian bytes of a 64-bit long, then abs.

    Unrolled because it runs once per operation under the scrambled zipfian distribution.
    """
    n = number & _MASK_64
    prime = FNV_PRIME_64
    mask = _MASK_64
    h = FNV_OFFSET_BASIS_64
    h = ((h ^ (n & 0xFF)) * prime) & mask
    h = ((h ^ ((n >> 8) & 0xFF)) * prime) & mask
    h = ((h ^ ((n >> 16) & 0xFF)) * prime) & mask
    h = ((h ^ ((n >> 24) & 0xFF)) * prime) & mask
    h = ((h ^ ((n >> 32) & 0xFF)) * prime) & mask
    h = ((h ^ ((n >> 40) & 0xFF)) * prime) & mask
    h = ((h ^ ((n >> 48) & 0xFF)) * prime) & mask
    h = ((h ^ (n >> 56)) * prime) & mask
    if h < _SIGN_64:
        return h
    if h == _SIGN_64:  # Math.abs(Long.MIN_VALUE) overflows and stays negative in Java
        return -_SIGN_64
    return (1 << 64) - h
