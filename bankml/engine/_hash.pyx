# cython: language_level=3
"""Fingerprint of a token mask: ``mask_hash(allowed_ids) -> (count, fnv1a_64)``.

The fingerprint is what bankml's tests and benchmarks compare between bankml and
the pinned libllama: the number of allowed token ids and the 64-bit FNV-1a hash
of those ids, sorted ascending, each written as 4 little-endian bytes (int32).
``tests/oracle/libllama.py`` imports this very function, so a mask computed by
either side hashes identically. The hash loop is C: a whole 152k-token mask
hashes in well under a millisecond.
"""
import numpy as np
from libc.stdint cimport uint8_t, uint64_t

FNV_OFFSET_BASIS = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3


cdef uint64_t fnv1a_64_kernel(const uint8_t* data, Py_ssize_t size) noexcept nogil:
    cdef uint64_t h = 0xCBF29CE484222325ULL
    cdef Py_ssize_t i
    for i in range(size):
        h = (h ^ data[i]) * 0x100000001B3ULL
    return h


def fnv1a_64(data):
    """64-bit FNV-1a of a bytes-like object (offset basis 0xcbf29ce484222325, prime 0x100000001b3)."""
    cdef const uint8_t[::1] view = memoryview(data).cast("B")
    if view.shape[0] == 0:
        return int(FNV_OFFSET_BASIS)
    return int(fnv1a_64_kernel(&view[0], view.shape[0]))


def mask_hash(allowed_ids):
    """Return ``(count, fnv1a_64)`` for a set of allowed token ids.

    ``allowed_ids`` is an iterable or array of integer token ids, each given
    once (a boolean mask is refused: pass ``np.flatnonzero(mask)``). The ids are
    sorted ascending, written as little-endian int32 and hashed with 64-bit
    FNV-1a. ``count`` is the number of ids.
    """
    arr = np.asarray(allowed_ids)
    if arr.dtype == np.bool_:
        raise TypeError("mask_hash takes token ids, not a boolean mask; use np.flatnonzero(mask)")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"mask_hash takes integer token ids, got dtype {arr.dtype}")
    ids = arr.astype(np.int64, copy=False).ravel()
    if ids.size > 1 and not bool((ids[1:] > ids[:-1]).all()):  # the masks bankml and libllama give are sorted
        ids = np.sort(ids)
    if ids.size and (ids[0] < -(2**31) or ids[ids.size - 1] >= 2**31):
        raise ValueError("token ids must fit in int32")
    return int(ids.size), fnv1a_64(ids.astype("<i4").tobytes())
