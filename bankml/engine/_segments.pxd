# Declarations of the segment cache (_segments.pxi): per top segment of a stack, the tokens accepted whatever
# lies below it and the trie nodes where a path pops out of it (continuations). Owns entry ids.
# Included by _grammar.pxd (textually, as uvloop's loop.pxd includes its handles' .pxd files): these
# declarations belong to the _grammar extension, not to a module of their own, and nothing cimports them
# by name. Named here without a cimport, declared by a .pxd included before this one: StackPool, StackSets,
# TrieWalk.
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libcpp.utility cimport pair
from libcpp.vector cimport vector
cimport cython

from bankml.engine._flatmap cimport flat_map
from bankml.engine._trie cimport trie_view
from bankml.engine._typedefs cimport node_t, position_t, token_t
from bankml.engine._zeroarray cimport zero_array


# SegmentCache.union_continuations: an entry's continuations are walked at once under this many stacks below
cdef enum:
    UNION_MIN_BELOW = 8

# Entry ids are int32 >= 0; NO_ENTRY: a segment (or continuation) that pops out too often to keep;
# CACHE_FULL: the segment cache is at its bound (build_frames).
cdef enum:
    NO_ENTRY = -1
    CACHE_FULL = -2


# One entry of the segment cache: the mask of a stack's top segment (its top frames, the
# rest of the stack replaced by SEGMENT_BASE), split into the tokens accepted whatever lies
# below the segment and the trie nodes at which a path pops out of it (continuations).
cdef struct segment_entry:
    int64_t tokens_start        # offset into entry_tokens (n_tokens >= 0) or entry_words (dense)
    int32_t n_tokens            # accepted token ids stored one by one, or -1 when stored as dense words
    int32_t n_continuations
    int64_t continuations_start # offset into entry_continuations
    int32_t length              # frames in the segment


# Scratch of the segment cache (vectors reused from call to call, so a mask allocates nothing).
@cython.final
cdef class SegmentScratch:
    cdef vector[position_t] frames                 # segment_of's frames
    cdef vector[token_t] collected                 # the tokens of one entry's continuations
    cdef vector[int32_t] pops                      # the nodes where the current segment walk popped
    cdef vector[int32_t] resolved                  # entry per stack of the set being masked
    cdef vector[node_t] resolved_below             # ... and the stack below each one's segment
    cdef vector[uint8_t] resolved_done             # ... whether its continuations are answered already (a union walk)
    cdef vector[node_t] union_stacks               # the stacks of a union walk


# What the segment cache did (for the figures and the tests).
cdef struct segment_counters:
    int64_t hits                # entries found built
    int64_t built               # entries built
    int64_t grown               # segment walks that popped out too often (the segment grew by a frame)
    int64_t continuation_walks  # continuations walked from the real stack below
    int64_t continuation_entries
    int64_t union_walks         # continuations of one entry under many stacks below, walked at once


@cython.final
cdef class SegmentCache:
    # segment entry ids: per top segment of a stack, its tokens and continuations
    cdef StackPool pool
    cdef StackSets sets
    cdef TrieWalk walk
    cdef SegmentScratch scratch
    cdef segment_counters counters
    cdef zero_array[int32_t] canonical_shift       # per element position: canonical_of(p) - p (_repetition_canonical)
    cdef vector[int32_t] chain_depth               # per rule: k of a repetition chain's R_k (0: none; _repetition_chains_into)
    cdef vector[int32_t] chain_next                # per rule: R_(k-1) of a chain rule (-1: none)
    # the segment cache: per top segment of a stack, the tokens accepted whatever lies below it and the
    # trie nodes where a path pops out of it (continuations), finished against the real stack at run time
    cdef bint use_segments
    cdef zero_array[uint32_t] segment_lengths      # per element position: bit L-1 set when entries of L frames exist
    cdef flat_map[uint64_t, pair[node_t, node_t]] segment_nodes  # (stack, L) -> (segment stack, stack below it)
    cdef flat_map[node_t, int32_t] entry_of   # segment stack -> entry
    cdef vector[segment_entry] entries
    cdef vector[uint32_t] entry_words              # dense entries, width words each
    cdef flat_map[uint64_t, int64_t] dense_offsets  # hash of a dense entry's words -> their offset (one copy each)
    cdef vector[token_t] entry_tokens              # sparse entries
    cdef vector[int32_t] entry_continuations
    cdef flat_map[node_t, int32_t] context_sets  # stack below a segment -> the set it advances to
    cdef flat_map[uint64_t, pair[int64_t, int32_t]] continuation_results  # (stack below, node) -> tokens
    cdef flat_map[uint64_t, int32_t] continuation_entry_of  # (frame re-pushed on SEGMENT_BASE, node) -> entry, -1 none
    cdef flat_map[uint64_t, pair[int64_t, int32_t]] entry_results  # (entry, stack below) -> its continuations' tokens
    cdef int64_t compose_cost                      # what the last segment_mask would cost to compose again
    cdef vector[token_t] continuation_tokens
    cdef size_t continuations_limit                # max_pops of segments that have a stack below them
    cdef vector[uint8_t] rule_nullable             # per rule id: it can match the empty string
    cdef zero_array[uint8_t] element_transparent   # per element position: 0 unknown, 1 no, 2 the rest of its alternative is nullable

    cdef int segment_of(self, node_t stack, int32_t length, node_t* segment, node_t* below) except -1 nogil
    cdef int32_t build_entry(self, node_t segment, int32_t length, const trie_view* trie, size_t max_pops) \
        except -2 nogil
    cdef position_t canonical_of(self, position_t pos) noexcept nogil
    cdef int32_t find_entry(self, node_t stack, const trie_view* trie, node_t* below) except -2 nogil
    cdef int32_t context_set(self, node_t below) except -2 nogil
    cdef bint transparent(self, position_t pos) noexcept nogil
    cdef int32_t skip_transparent(self, node_t stack, int32_t length) noexcept nogil
    cdef int segment_mask(self, int32_t set_id, const trie_view* trie, uint32_t* out) except -1 nogil
    cdef void clear_segments(self) noexcept nogil
    cdef bint segment_cache_full(self) noexcept nogil
    cdef size_t segment_cache_bytes(self) noexcept nogil
    cdef int32_t build_continuation_entry(self, node_t frame, int32_t node, const trie_view* trie) except -2 nogil
    cdef int continuation_into(self, const trie_view* trie, int32_t node, node_t below, uint32_t* out,
                               vector[token_t]* collect, int32_t depth) except -1 nogil
    cdef int32_t build_frames(self, list frames, bint whole, const trie_view* trie) except -3
    cdef bint union_continuations(self, int64_t k, const trie_view* trie, uint32_t* out) except -1 nogil
    cdef void reserve_headroom(self) noexcept nogil
