# Declarations of the interned stack sets (_stacksets.pxi): their transitions by a code point and one
# set_summary each, computed from per-element class summaries. Owns set ids.
# Included by _grammar.pxd (textually, as uvloop's loop.pxd includes its handles' .pxd files): these
# declarations belong to the _grammar extension, not to a module of their own, and nothing cimports them
# by name. Named here without a cimport, declared by a .pxd included before this one: StackPool.
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libcpp.utility cimport pair
from libcpp.vector cimport vector
cimport cython

from bankml.engine._elements cimport grammar_element
from bankml.engine._flatmap cimport flat_map
from bankml.engine._typedefs cimport node_t, position_t
from bankml.engine._utf8 cimport partial_utf8
from bankml.engine._zeroarray cimport zero_array


# The conventions of the set summaries. A set id is an int32 >= 0; NO_SET (-1) is "no set": the transition no
# stack survives, a successor or run end that does not exist. Methods that return a set id or an entry id raise
# with -2 (`except -2`), those that return a status -1.
cdef enum:
    NO_SET = -1
    RUN_UNKNOWN = -1         # run_length before compute_run
    VIABLE_UNKNOWN = -1      # viable_start before compute_viable

# element_flags bits: what compute_loop needs to know about a character class, computed once
cdef enum:
    ELEMENT_KNOWN = 1
    ELEMENT_CONSTANT_ABOVE = 2   # membership is the same for every code point >= 0x80
    ELEMENT_MEMBER_ABOVE = 4     # ... and those code points are members
    ELEMENT_ALL_PARTIALS = 8     # match_partial_char holds for every partial character that can complete
    ELEMENT_TEXT_KNOWN = 16      # the two bits below are computed (element_text_info)
    ELEMENT_CONSTANT_TEXT = 32   # membership is the same for every text code point >= 0x80 (TEXT_ABOVE)
    ELEMENT_MEMBER_TEXT = 64     # ... and those code points are members

# The code points >= 0x80 that Unicode text holds: [0x80, 0xD7FF] and [0xE000, 0x10FFFF] (no surrogates). A token
# decoding to any other (SUBTREE_ODD) is never taken whole by a family.
cdef enum:
    TEXT_LOW_END = 0xD7FF
    TEXT_HIGH_START = 0xE000
    TEXT_MAX = 0x10FFFF
    MAX_FAMILY = 64              # sets one compute_family explores before it gives up
    MAX_FAMILY_ROUNDS = 8        # ... and the times it starts again with a narrower class

# StackSets.index_class: a class of more alternatives than this is matched through its sorted intervals
cdef enum:
    LONG_CLASS = 16


# What the fast path knows about a stack set, filled as it is needed (flags say what is known).
cdef struct set_summary:
    uint64_t class_ascii[2]     # the ASCII code points that lead to the successor (its class)
    int64_t viable_start        # offset of the set's intervals in viable_bounds, VIABLE_UNKNOWN before computed
    int32_t viable_count        # (first, last) code point pairs there
    int32_t successor           # the set most code points lead to (itself in a loop), or NO_SET
    int32_t run_length          # sets in a row along the successors with this set's class, RUN_UNKNOWN before
    int32_t run_end             # the set after that run, or NO_SET
    position_t class_above      # (SET_CLASS_ABOVE) the one class on top that takes code points >= 0x80
    uint8_t flags               # SET_* bits
    uint8_t partial_mode        # PARTIAL_* for set_accepts_partial
    uint64_t total_ascii[2]     # (TOTAL_KNOWN) ASCII code points of the set's family class (compute_family)
    uint8_t total_flags         # TOTAL_* bits


cdef enum:
    SET_CLASS_KNOWN = 1         # successor and class are computed (compute_loop)
    SET_CLASS_NON_ASCII = 2     # every code point >= 0x80 leads to the successor
    SET_ALL_PARTIALS = 4        # the set takes every partial character that can still complete
    SET_HAS_BASE = 8            # the set holds SEGMENT_BASE: some path popped out of the segment
    SET_RUN_IMPURE = 16         # (with run_length) a set of its run holds SEGMENT_BASE or a token terminal on top
    SET_ABOVE_KNOWN = 32        # SET_ABOVE_CONSTANT is computed (summarize_tops)
    SET_ABOVE_CONSTANT = 64     # every class on top takes all code points >= 0x80 alike (each all or none)
    SET_CLASS_ABOVE = 128       # the code points >= 0x80 that class_above takes lead to the successor (the other
                                # classes on top take none)

# set_summary.total_flags: the set's family (compute_family), sets closed under the code points of one class, each
# taking every one of them: every string of them is viable from the set, so a trie subtree of only such code
# points is accepted whole.
cdef enum:
    TOTAL_KNOWN = 1             # total_ascii and the bits below are computed
    TOTAL_TEXT = 2              # every text code point >= 0x80 is in the class
    TOTAL_PARTIALS = 4          # every set of the family takes every partial character that can still complete

# set_summary.partial_mode: whether a set takes characters left unfinished by a token
cdef enum:
    PARTIAL_UNKNOWN = 0
    PARTIAL_ALL = 1             # every one that can still complete (overlong leads never)
    PARTIAL_NONE = 2            # none
    PARTIAL_MIXED = 3           # ask each stack


@cython.final
cdef class StackSets:
    # set ids: interned stack sets, their transitions and summaries
    cdef StackPool pool
    cdef vector[node_t] step_stacks                # scratch of step_set
    cdef vector[node_t] set_nodes                  # set i is set_nodes[set_start[i]:set_start[i + 1]]
    cdef vector[int64_t] set_start
    cdef flat_map[uint64_t, int32_t] set_by_hash   # hash of a set's nodes -> the last set with that hash
    cdef vector[int32_t] set_hash_next             # the previous set with the same hash, or -1
    cdef flat_map[uint64_t, int32_t] transitions   # (set << 32 | code point) -> set, or -1 (no stack survives)
    cdef flat_map[uint64_t, pair[uint64_t, int32_t]] pattern_transitions  # hash(set, matching stacks) -> (matching stacks, set)
    cdef flat_map[uint64_t, uint8_t] partial_memo  # (long class's position, unfinished character) -> match_partial_char
    cdef vector[set_summary] summaries             # per set id
    cdef vector[int32_t] run_chain                 # scratch of compute_run
    cdef vector[int32_t] family                    # scratch of compute_family
    cdef vector[position_t] family_tops            # scratch of collect_tops: a set's distinct class tops
    cdef vector[uint32_t] text_reps                # scratch of text_steps: a code point per group of text ones
    cdef int32_t max_token_depth                   # the most code points any token takes
    cdef zero_array[uint64_t] element_ascii        # 2 words per element position: the ASCII members of its class
    cdef zero_array[uint8_t] element_flags         # per element position: ELEMENT_* bits, filled on first use
    cdef vector[uint32_t] viable_bounds            # (first, last) code point pairs
    cdef zero_array[int64_t] element_long          # per element position: 0 unknown, -1 a short class (match_char),
                                                   # else 1 + where its intervals start in class_bounds
    cdef vector[uint32_t] class_bounds             # per long class: count, its end's position, (first, last) pairs

    cdef int32_t intern_set(self, vector[node_t]& nodes) except -2 nogil
    cdef int32_t step_set(self, int32_t set_id, uint32_t cp) except -2 nogil
    cdef int32_t transition(self, int32_t set_id, uint32_t cp) except -2 nogil
    cdef int element_info(self, position_t pos) except -1 nogil
    cdef int64_t index_class(self, position_t pos) except -2 nogil
    cdef int class_takes(self, position_t pos, uint32_t cp, const grammar_element** after) except -1 nogil
    cdef int compute_loop(self, int32_t set_id) except -1 nogil
    cdef int summarize_tops(self, int32_t set_id) except -1 nogil
    cdef uint8_t partial_mode_of(self, int32_t set_id) except 0 nogil
    cdef bint set_accepts_partial(self, int32_t set_id, partial_utf8 partial) except -1 nogil
    cdef bint constant_above(self, int32_t set_id) except -1 nogil
    cdef bint chain_accepts(self, int32_t set_id, uint64_t ascii_lo, uint64_t ascii_hi, uint8_t flags,
                            int32_t depth, const uint32_t* span) except -1 nogil
    cdef bint class_covers(self, position_t pos, uint32_t low, uint32_t high) except -1 nogil
    cdef int find_class_above(self, int32_t set_id, int32_t successor) except -1 nogil
    cdef bint same_class(self, int32_t a, int32_t b) noexcept nogil
    cdef int compute_run(self, int32_t set_id) except -1 nogil
    cdef int element_text_info(self, position_t pos) except -1 nogil
    cdef int compute_family(self, int32_t set_id) except -1 nogil
    cdef int no_family(self, int32_t set_id) except -1 nogil
    cdef int collect_tops(self, int32_t x) except -1 nogil
    cdef bint text_steps(self) except -1 nogil
    cdef bint family_accepts(self, int32_t set_id, uint64_t ascii_lo, uint64_t ascii_hi, uint8_t flags) noexcept nogil
    cdef int compute_viable(self, int32_t set_id) except -1 nogil
    cdef void reserve_headroom(self) noexcept nogil
