# Bit-set helpers shared by the engine's modules, all inline (no state, nothing to link).
#
# Two kinds of bit sets: token masks (uint32 words, bit t of word t >> 5 is token t, the wire format
# of fill_next_token_bitmask) and trie-position sets (uint64 words, bit p of word p >> 6 is trie
# position p). The drain iterators read a position set and clear it as they go, so a set is all zero
# again once drained: the walk's marks need no separate clearing pass.
from libc.stdint cimport int64_t, uint32_t, uint64_t

from bankml.engine._typedefs cimport token_t

cdef extern from *:
    int __builtin_ctzll(unsigned long long) nogil
    int __builtin_clzll(unsigned long long) nogil
    void __builtin_prefetch(const void*) nogil


cdef inline int ctz64(uint64_t bits) noexcept nogil:
    """The index of the lowest set bit (bits != 0)."""
    return __builtin_ctzll(bits)


cdef inline void prefetch(const void* address) noexcept nogil:
    """Ask for the cache line at address ahead of its use (a hint: never faults)."""
    __builtin_prefetch(address)


cdef inline int clz64(uint64_t bits) noexcept nogil:
    """The number of zero bits above the highest set bit (bits != 0)."""
    return __builtin_clzll(bits)


cdef inline int64_t popcount64(uint64_t bits) noexcept nogil:
    # Bit-parallel sums, not __builtin_popcountll: built without -mpopcnt (the wheel runs on any x86-64) that
    # builtin is a call to libgcc's __popcountdi2, 4-6 % of a cold mask's time in take_run's counted clears.
    bits = bits - ((bits >> 1) & 0x5555555555555555ULL)
    bits = (bits & 0x3333333333333333ULL) + ((bits >> 2) & 0x3333333333333333ULL)
    bits = (bits + (bits >> 4)) & 0x0F0F0F0F0F0F0F0FULL
    return <int64_t>((bits * 0x0101010101010101ULL) >> 56)


cdef inline uint64_t range_word_mask(int64_t w, int64_t lo, int64_t hi) noexcept nogil:
    """The bits of position word w that lie in [lo, hi) (lo < hi, w between their words)."""
    cdef uint64_t m = ~(<uint64_t>0)
    if w == lo >> 6:
        m &= (~(<uint64_t>0)) << (lo & 63)
    if w == (hi - 1) >> 6:
        m &= (~(<uint64_t>0)) >> (63 - ((hi - 1) & 63))
    return m


cdef inline int64_t clear_masked_counted(uint64_t* bits, const uint64_t* mask, int64_t lo, int64_t hi) noexcept nogil:
    """Clear the positions in [lo, hi) that mask holds (all of them when mask is NULL); how many were set."""
    cdef int64_t w, n = 0
    cdef uint64_t m
    if lo >= hi:
        return 0
    for w in range(lo >> 6, ((hi - 1) >> 6) + 1):
        m = range_word_mask(w, lo, hi)
        if mask != NULL:
            m &= mask[w]
        n += popcount64(bits[w] & m)
        bits[w] &= ~m
    return n


cdef inline int64_t clear_range_counted(uint64_t* bits, int64_t lo, int64_t hi) noexcept nogil:
    """Clear the positions [lo, hi); how many were set."""
    return clear_masked_counted(bits, NULL, lo, hi)


cdef inline bint range_has_marks(const uint64_t* bits, int64_t lo, int64_t hi) noexcept nogil:
    """Whether a position in [lo, hi) is set."""
    cdef int64_t w
    if lo >= hi:
        return False
    for w in range(lo >> 6, ((hi - 1) >> 6) + 1):
        if bits[w] & range_word_mask(w, lo, hi):
            return True
    return False


cdef inline void set_token_bit(uint32_t* mask, token_t token) noexcept nogil:
    mask[token >> 5] |= (<uint32_t>1) << (token & 31)


cdef inline void clear_token_bit(uint32_t* mask, token_t token) noexcept nogil:
    mask[token >> 5] &= ~((<uint32_t>1) << (token & 31))


cdef inline void set_position_range(uint64_t* bits, int64_t lo, int64_t hi) noexcept nogil:
    """Set the positions [lo, hi)."""
    cdef int64_t first_word, last_word, w
    if lo >= hi:
        return
    first_word = lo >> 6
    last_word = (hi - 1) >> 6
    if first_word == last_word:
        bits[first_word] |= ((~(<uint64_t>0)) >> (63 - ((hi - 1) & 63))) & ((~(<uint64_t>0)) << (lo & 63))
        return
    bits[first_word] |= (~(<uint64_t>0)) << (lo & 63)
    for w in range(first_word + 1, last_word):
        bits[w] = ~(<uint64_t>0)
    bits[last_word] |= (~(<uint64_t>0)) >> (63 - ((hi - 1) & 63))


cdef inline void set_position(uint64_t* bits, int64_t position) noexcept nogil:
    bits[position >> 6] |= (<uint64_t>1) << (position & 63)


cdef inline bint has_position(const uint64_t* bits, int64_t position) noexcept nogil:
    return (bits[position >> 6] >> (position & 63)) & 1


cdef inline void clear_position_range(uint64_t* bits, int64_t lo, int64_t hi) noexcept nogil:
    """Clear the positions [lo, hi)."""
    cdef int64_t w
    if lo >= hi:
        return
    for w in range(lo >> 6, ((hi - 1) >> 6) + 1):
        bits[w] &= ~range_word_mask(w, lo, hi)


# A drain over words[word:end_word] of a position set: next_set_position gives the set positions in
# increasing order, -1 once done, and zeroes each word it reads; next_unset_position gives the clear
# positions below n_positions and zeroes every word.
cdef struct position_drain:
    uint64_t* words
    int64_t word          # the next word to read
    int64_t end_word
    uint64_t bits         # what is left of the word read last
    int64_t n_positions   # (next_unset_position) positions past it are not given


cdef inline position_drain drain_words(uint64_t* words, int64_t first_word, int64_t end_word,
                                       int64_t n_positions) noexcept nogil:
    cdef position_drain drain
    drain.words = words
    drain.word = first_word
    drain.end_word = end_word
    drain.bits = 0
    drain.n_positions = n_positions
    return drain


cdef inline int64_t next_position(position_drain* drain, bint unset) noexcept nogil:
    """The next set position (unset: the next clear one below n_positions), or -1 once done."""
    cdef int64_t position
    while drain.bits == 0:
        if drain.word >= drain.end_word:
            return -1
        drain.bits = ~drain.words[drain.word] if unset else drain.words[drain.word]
        drain.words[drain.word] = 0
        if unset and drain.word == (drain.n_positions >> 6) and (drain.n_positions & 63):
            drain.bits &= ((<uint64_t>1) << (drain.n_positions & 63)) - 1
        drain.word += 1
    position = ((drain.word - 1) << 6) + __builtin_ctzll(drain.bits)
    drain.bits &= drain.bits - 1
    return position


cdef inline int64_t next_set_position(position_drain* drain) noexcept nogil:
    return next_position(drain, False)


cdef inline int64_t next_unset_position(position_drain* drain) noexcept nogil:
    return next_position(drain, True)


cdef inline uint64_t words_hash(const uint32_t* words, int64_t n) noexcept nogil:
    """A 64-bit hash of n words (four independent lanes, so the multiplies overlap)."""
    cdef uint64_t h0 = 0x9E3779B97F4A7C15ULL, h1 = 0xC2B2AE3D27D4EB4FULL, h2 = 0x165667B19E3779F9ULL
    cdef uint64_t h3 = 0x27D4EB2F165667C5ULL
    cdef int64_t i = 0
    while i + 4 <= n:
        h0 = (h0 ^ words[i]) * 0x100000001B3ULL
        h1 = (h1 ^ words[i + 1]) * 0x100000001B3ULL
        h2 = (h2 ^ words[i + 2]) * 0x100000001B3ULL
        h3 = (h3 ^ words[i + 3]) * 0x100000001B3ULL
        i += 4
    while i < n:
        h0 = (h0 ^ words[i]) * 0x100000001B3ULL
        i += 1
    return h0 ^ (h1 * 31) ^ (h2 * 961) ^ (h3 * 29791) ^ <uint64_t>n
