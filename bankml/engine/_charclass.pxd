# Character classes and terminals of the flat rules, all inline (no state). Names follow llama.cpp's
# src/llama-grammar.cpp (match_char, match_partial_char, match_token); class_next_range is the one
# walk over a class's alternatives that every reader here shares.
#
# A class is CHAR / CHAR_NOT / CHAR_ANY followed by CHAR_ALT and CHAR_RNG_UPPER elements: each
# alternative is one code point, a range (value, then RNG_UPPER's value), or any code point (CHAR_ANY).
from libc.stdint cimport int64_t, uint32_t, uint64_t
from libcpp.algorithm cimport sort
from libcpp.utility cimport pair
from libcpp.vector cimport vector

from bankml.engine._elements cimport (LLAMA_GRETYPE_ALT, LLAMA_GRETYPE_CHAR, LLAMA_GRETYPE_CHAR_ALT, LLAMA_GRETYPE_CHAR_ANY,
                            LLAMA_GRETYPE_CHAR_RNG_UPPER, LLAMA_GRETYPE_END, LLAMA_GRETYPE_TOKEN,
                            LLAMA_GRETYPE_TOKEN_NOT, grammar_element)
from bankml.engine._typedefs cimport token_t
from bankml.engine._utf8 cimport partial_utf8

cdef extern from *:
    """
    static const uint32_t bankml_max_code_point = 0xFFFFFFFFu;
    """
    # the largest value a range can name (CHAR_ANY's range is [0, MAX_CODE_POINT])
    const uint32_t MAX_CODE_POINT "bankml_max_code_point"


cdef inline bint is_end_of_sequence(const grammar_element* pos) noexcept nogil:
    return pos.type == LLAMA_GRETYPE_END or pos.type == LLAMA_GRETYPE_ALT


cdef inline bint is_token_element(const grammar_element* pos) noexcept nogil:
    return pos.type == LLAMA_GRETYPE_TOKEN or pos.type == LLAMA_GRETYPE_TOKEN_NOT


cdef inline bint is_positive_class(const grammar_element* pos) noexcept nogil:
    return pos.type == LLAMA_GRETYPE_CHAR or pos.type == LLAMA_GRETYPE_CHAR_ANY


cdef inline const grammar_element* class_next_range(const grammar_element* pos, uint32_t* first,
                                                    uint32_t* last) noexcept nogil:
    """The alternative of a class at pos as the range [*first, *last]; returns the element after it
    (another alternative when its type is CHAR_ALT, else the element past the class)."""
    if pos[1].type == LLAMA_GRETYPE_CHAR_RNG_UPPER:
        first[0] = pos.value
        last[0] = pos[1].value
        return pos + 2
    if pos.type == LLAMA_GRETYPE_CHAR_ANY:
        first[0] = 0
        last[0] = MAX_CODE_POINT
        return pos + 1
    first[0] = pos.value
    last[0] = pos.value
    return pos + 1


cdef inline bint match_char(const grammar_element* pos, uint32_t chr, const grammar_element** after) noexcept nogil:
    """Whether chr satisfies the character class at pos; *after is the element past the class."""
    cdef bint found = False
    cdef bint is_positive_char = is_positive_class(pos)
    cdef uint32_t first, last
    while True:
        pos = class_next_range(pos, &first, &last)
        found = found or (first <= chr and chr <= last)
        if pos.type != LLAMA_GRETYPE_CHAR_ALT:
            break
    after[0] = pos
    return found == is_positive_char


cdef inline void class_ascii_bits(const grammar_element* pos, uint64_t* lo, uint64_t* hi) noexcept nogil:
    """The ASCII code points (0-127) match_char takes at the class at pos, as bits: *lo holds 0-63, *hi 64-127.
    One pass over the class's ranges instead of 128 match_char calls."""
    cdef bint is_positive_char = is_positive_class(pos)
    cdef uint32_t first, last, a, b
    cdef uint64_t bits[2]
    cdef int half
    bits[0] = 0
    bits[1] = 0
    while True:
        pos = class_next_range(pos, &first, &last)
        if first <= last and first < 128:
            for half in range(2):
                # the range's part in [64 * half, 64 * half + 63]
                a = first if first > <uint32_t>(64 * half) else <uint32_t>(64 * half)
                b = last if last < <uint32_t>(64 * half + 63) else <uint32_t>(64 * half + 63)
                if a <= b:
                    bits[half] |= ((~(<uint64_t>0)) >> (63 - (b - 64 * half))) & ((~(<uint64_t>0)) << (a - 64 * half))
        if pos.type != LLAMA_GRETYPE_CHAR_ALT:
            break
    if not is_positive_char:
        bits[0] = ~bits[0]
        bits[1] = ~bits[1]
    lo[0] = bits[0]
    hi[0] = bits[1]


cdef inline bint partial_char_range(partial_utf8 partial, uint32_t* low, uint32_t* high) noexcept nogil:
    """The code points [*low, *high] an unfinished UTF-8 sequence (n_remain > 0) can still complete to,
    as match_partial_char reads them; False for none: an invalid sequence, or a 7-bit character split
    over two bytes (overlong)."""
    cdef int n_remain = partial.n_remain
    if n_remain < 0 or (n_remain == 1 and partial.value < 2):
        return False
    low[0] = partial.value << (n_remain * 6)
    high[0] = low[0] | ((1 << (n_remain * 6)) - 1)
    if low[0] == 0:
        if n_remain == 2:
            low[0] = 1 << 11
        elif n_remain == 3:
            low[0] = 1 << 16
    return True


cdef inline bint match_partial_char(const grammar_element* pos, partial_utf8 partial) noexcept nogil:
    """Whether some completion of an unfinished UTF-8 sequence could satisfy the class at pos."""
    cdef bint is_positive_char = is_positive_class(pos)
    cdef uint32_t low, high, first, last
    if not partial_char_range(partial, &low, &high):
        return False
    while True:
        pos = class_next_range(pos, &first, &last)
        if first <= high and low <= last:
            return is_positive_char
        if pos.type != LLAMA_GRETYPE_CHAR_ALT:
            break
    return not is_positive_char


cdef inline bint match_token(const grammar_element* pos, token_t token) noexcept nogil:
    if pos.type == LLAMA_GRETYPE_TOKEN:
        return pos.value == <uint32_t>token
    return pos.value != <uint32_t>token


cdef inline const grammar_element* class_end(const grammar_element* pos) noexcept nogil:
    """The element past the class at pos."""
    cdef uint32_t first, last
    while True:
        pos = class_next_range(pos, &first, &last)
        if pos.type != LLAMA_GRETYPE_CHAR_ALT:
            return pos


cdef inline size_t class_alternatives(const grammar_element* pos, const grammar_element** end) noexcept nogil:
    """The number of alternatives of the class at pos; *end is the element past it."""
    cdef uint32_t first, last
    cdef size_t n = 0
    while True:
        pos = class_next_range(pos, &first, &last)
        n += 1
        if pos.type != LLAMA_GRETYPE_CHAR_ALT:
            end[0] = pos
            return n


cdef inline bint class_constant_from(const grammar_element* pos, uint32_t low, bint* member) noexcept nogil:
    """Whether membership in the character class at pos is the same for every code point >= low."""
    cdef bint is_positive_char = is_positive_class(pos)
    cdef bint covered = False, touched = False
    cdef uint32_t first, last
    while True:
        pos = class_next_range(pos, &first, &last)
        if last >= low and first <= last:
            touched = True
            if first <= low and last == MAX_CODE_POINT:
                covered = True
        if pos.type != LLAMA_GRETYPE_CHAR_ALT:
            break
    if covered:
        member[0] = is_positive_char
        return True
    if not touched:
        member[0] = not is_positive_char
        return True
    return False


cdef inline bint class_accepts_all_partials(const grammar_element* pos) noexcept nogil:
    """Whether match_partial_char at pos holds for every partial sequence that can still complete.

    Every such sequence completes to a code point >= 0x80, so a negated class that
    excludes only ASCII, or a class that takes all of [0x80, max], accepts them all.
    """
    cdef bint is_positive_char = is_positive_class(pos)
    cdef uint32_t first, last
    cdef bint all_ascii = True
    while True:
        pos = class_next_range(pos, &first, &last)
        if is_positive_char and first <= 0x80 and last == MAX_CODE_POINT:
            return True   # (CHAR_ANY included)
        if last >= 0x80 and first <= last:
            all_ascii = False
        if pos.type != LLAMA_GRETYPE_CHAR_ALT:
            break
    return (not is_positive_char) and all_ascii


cdef inline void class_intervals(const grammar_element* pos, vector[pair[uint32_t, uint32_t]]& intervals,
                                 vector[pair[uint32_t, uint32_t]]& scratch) noexcept nogil:
    """Append the code points the class at pos takes, as ranges (unsorted, maybe overlapping)."""
    cdef bint positive = is_positive_class(pos)
    cdef uint32_t first, last, cursor
    cdef size_t j
    scratch.clear()
    while True:
        pos = class_next_range(pos, &first, &last)
        if first <= last:
            scratch.push_back(pair[uint32_t, uint32_t](first, last))
        if pos.type != LLAMA_GRETYPE_CHAR_ALT:
            break
    if positive:
        intervals.insert(intervals.end(), scratch.begin(), scratch.end())
        return
    # a negated class takes everything its ranges leave out
    sort(scratch.begin(), scratch.end())
    cursor = 0
    for j in range(scratch.size()):
        if scratch[j].first > cursor:
            intervals.push_back(pair[uint32_t, uint32_t](cursor, scratch[j].first - 1))
        if scratch[j].second == MAX_CODE_POINT:
            return
        if scratch[j].second + 1 > cursor:
            cursor = scratch[j].second + 1
    intervals.push_back(pair[uint32_t, uint32_t](cursor, MAX_CODE_POINT))


cdef inline int64_t first_interval_reaching(const uint32_t* bounds, int64_t lo, int64_t hi, uint32_t cp) noexcept nogil:
    """The first interval j in [lo, hi) of bounds (intervals [bounds[2j], bounds[2j + 1]], sorted and disjoint)
    whose upper bound is at least cp; hi when none is."""
    cdef int64_t mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if bounds[2 * mid + 1] < cp:
            lo = mid + 1
        else:
            hi = mid
    return lo
