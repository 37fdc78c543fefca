# Declarations of the trie walk (_walk.pxi): the vocabulary trie walked with a stack set, marking the accepted
# tokens' trie positions; a walk's mode is the walk_state it is given. Owns trie positions.
# Included by _grammar.pxd (textually, as uvloop's loop.pxd includes its handles' .pxd files): these
# declarations belong to the _grammar extension, not to a module of their own, and nothing cimports them
# by name. Named here without a cimport, declared by a .pxd included before this one: StackPool, StackSets.
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t
from libcpp.vector cimport vector
cimport cython

from bankml.engine._flatmap cimport flat_map
from bankml.engine._trie cimport VocabTrie, trie_view
from bankml.engine._typedefs cimport token_t


# What one trie walk carries (passed to trie_visit explicitly, never kept on the context): whether it
# records where paths pop out of a segment, and the bound past which it gives up.
cdef struct walk_state:
    bint collect_pops           # the walk runs from a segment: record the nodes where paths pop out of it
    bint aborted                # it popped out too often and stopped (the segment is too short)
    size_t max_pops             # the bound on those nodes (POPS_UNBOUNDED: none)
    int64_t pop_nodes           # trie nodes below them, in all
    vector[int32_t]* pops       # where they are recorded (NULL when not collecting)


# An exception of take_run: a node whose code point leaves the run's class, topmost on its path, with what
# the run reads of it (copied from the trie's arrays, so a kept list is read in order).
cdef struct run_exception:
    int64_t token_lo            # its subtree's token positions [token_lo, token_hi)
    int64_t token_hi
    int32_t node
    int32_t node_end            # its subtree's nodes [node, node_end)
    int32_t depth               # code points from the root
    uint32_t cp                 # its code point


# What trie_visit did below a big subtree from one set: the marks it added and the pops it recorded
# (TrieWalk.visit_recorded replays them when the same subtree meets the same set again).
cdef struct subtree_record:
    int64_t words_start         # subtree_word_at / subtree_words[words_start:words_start + n_words]
    int64_t n_words
    int64_t pops_start          # subtree_pops[pops_start:pops_start + n_pops]
    int64_t n_pops
    int64_t pop_nodes
    int64_t n_marked


cdef struct run_exception_list:
    uint64_t outside_lo         # the code points outside the run's class (bits 0-63, 64-127)
    uint64_t outside_hi
    int32_t child               # the subtree's node
    int32_t depth               # scanned this many code points below it
    int64_t start               # its exceptions: run_lists_items[start:start + count], shallower first
    int64_t count


@cython.final
cdef class TrieWalk:
    # trie positions: the vocabulary trie walked with a stack set, marking accepted positions
    cdef StackPool pool
    cdef StackSets sets
    cdef VocabTrie trie
    cdef vector[uint32_t] trie_token_words         # the bits of every token in the trie
    cdef vector[uint64_t] position_bits            # scratch: one bit per trie position, all zero between walks
    cdef int64_t n_marked                          # positions marked by the current walk (an upper bound)
    cdef trie_view trie_arrays                     # trie.view(), taken once (the trie never changes)
    cdef readonly int64_t visited_nodes
    cdef readonly int64_t run_takes                # subtrees take_run took along a bounded run
    cdef vector[int32_t] run_sets                  # scratch stack of take_run (each call pops what it pushed)
    cdef vector[run_exception] run_items           # ... and of its exceptions scanned (scan_run_exceptions)
    cdef vector[run_exception_list] run_lists      # exceptions kept per (big subtree, outside code points)
    cdef vector[run_exception] run_lists_items     # ... their items
    cdef vector[uint64_t] run_cover                # scratch of take_run, a bit per trie node: below an exception
                                                   # (all 0 between calls; bits, not bytes: it stays in cache)
    cdef flat_map[uint64_t, int32_t] subtree_memo  # (child, set, collecting pops) -> its subtree_record
    cdef vector[subtree_record] subtree_records
    cdef vector[int64_t] subtree_word_at            # the records' marks: position_bits word index ...
    cdef vector[uint64_t] subtree_words             # ... and the bits the visit set there
    cdef vector[int32_t] subtree_pops               # the records' pops
    cdef vector[uint64_t] subtree_before            # scratch: the words before a recorded visit
    cdef readonly int64_t subtree_replays

    cdef void ensure_position_bits(self) noexcept nogil
    cdef void clear_marks(self) noexcept nogil
    cdef void drain_subtree(self, const trie_view* trie, int32_t node, vector[token_t]* tokens,
                            uint32_t* out) noexcept nogil
    cdef bint family_takes_child(self, const trie_view* trie, int32_t child, int32_t set_id) noexcept nogil
    cdef int visit_child(self, const trie_view* trie, int32_t child, int32_t set_id, walk_state* walk) except -1 nogil
    cdef int visit_recorded(self, const trie_view* trie, int32_t child, int32_t set_id, walk_state* walk) except -1 nogil
    cdef bint take_run(self, const trie_view* trie, int32_t child, int32_t set_id, walk_state* walk) except -1 nogil
    cdef int scan_run_exceptions(self, const trie_view* trie, int32_t child, const uint64_t* outside,
                                 int32_t top_depth) except -1 nogil
    cdef int32_t run_exception_list(self, const trie_view* trie, int32_t child, const uint64_t* outside,
                                    int32_t top_depth) except -2 nogil
    cdef bint words_at_run_end(self, int32_t set_id) except -1 nogil
    cdef bint set_may_take(self, int32_t set_id, uint32_t cp) except -1 nogil
    cdef int run_end_nodes(self, const trie_view* trie, int32_t child, int32_t after, int32_t depth,
                           walk_state* walk) except -1 nogil
    cdef int trie_visit(self, const trie_view* trie, int32_t node, int32_t set_id, walk_state* walk) except -1 nogil
    cdef int walk_mask(self, int32_t set_id, const trie_view* trie, uint32_t* out) except -1 nogil
    cdef int positions_to_tokens(self, const trie_view* trie, uint32_t* out) except -1 nogil
