# Declarations of the mask cache (_maskcache.pxi): whole-vocabulary masks of stack sets (and of a set with an
# open UTF-8 character) in fixed-size chunks drawn from a process-wide pool. Owns mask slots.
# Included by _grammar.pxd (textually, as uvloop's loop.pxd includes its handles' .pxd files): these
# declarations belong to the _grammar extension, not to a module of their own, and nothing cimports them
# by name.
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t
from libcpp.vector cimport vector
cimport cython

from bankml.engine._flatmap cimport flat_map
from bankml.engine._typedefs cimport token_t


# mask slots: cached whole-vocabulary masks, of a stack set or of a (set, open character) pair
@cython.final
cdef class MaskCache:
    cdef flat_map[int32_t, int64_t] set_slot  # set -> slot of its cached mask
    cdef flat_map[uint64_t, int64_t] partial_slot  # (set, open character) -> slot of its cached mask
    cdef vector[vector[uint32_t]] chunks           # slot s is chunks[s // MASKS_PER_CHUNK] at (s % MASKS_PER_CHUNK) * width
    cdef int64_t n_masks
    cdef int64_t width                             # words per mask

    cdef int64_t slot_of_set(self, int32_t set_id) noexcept nogil
    cdef int64_t slot_of_partial(self, uint64_t key) noexcept nogil
    cdef void copy_slot(self, int64_t slot, uint32_t* out) noexcept nogil
    cdef int slot_bit(self, int64_t slot, token_t token) noexcept nogil
    cdef int64_t store(self, const uint32_t* mask) noexcept nogil
    cdef void keep_set(self, int32_t set_id, const uint32_t* mask) noexcept nogil
    cdef void keep_partial(self, uint64_t key, const uint32_t* mask) noexcept nogil
    cdef void clear(self) noexcept nogil
    cdef size_t memory_bytes(self) noexcept nogil
