# Declarations of MatchContext (_context.pxi): what the matchers of one (Rules, Vocab) pair share, as a
# composition of the parts under one lock, and the locked entry points Grammar calls. Owns the lock and
# the mask counters.
# Included by _grammar.pxd (textually, as uvloop's loop.pxd includes its handles' .pxd files): these
# declarations belong to the _grammar extension, not to a module of their own, and nothing cimports them
# by name. Named here without a cimport, declared by a .pxd included before this one: StackPool, StackSets,
# TrieWalk, SegmentCache, MaskCache, grammar_candidate.
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t
from libcpp.unordered_set cimport unordered_set
from libcpp.vector cimport vector
from cpython.pythread cimport PyThread_type_lock
cimport numpy as cnp

from bankml.engine._rules cimport Rules
from bankml.engine._trie cimport DecodedVocab, trie_view, vocab_view
from bankml.engine._typedefs cimport node_t, position_t, token_t
from bankml.engine._utf8 cimport partial_utf8


# What the matchers of one (Rules, Vocab) pair share: the parts above, under one lock.
cdef class MatchContext:
    cdef readonly Rules rules
    cdef readonly object vocab
    cdef readonly DecodedVocab decoded
    cdef PyThread_type_lock lock
    cdef StackPool pool
    cdef StackSets sets
    cdef TrieWalk walk
    cdef SegmentCache segments
    cdef MaskCache masks
    cdef vector[token_t] eog_tokens
    cdef unordered_set[int32_t] fast_failed        # sets whose fast mask ran past a bound: reference path only
    cdef readonly int64_t fast_masks, cached_masks, reference_masks
    cdef readonly int64_t fallback_masks           # fast masks that ran past a bound and went to the reference path
    cdef readonly int64_t partial_masks            # masks of states inside a character worked out (not copied)
    cdef readonly int64_t partial_shared           # ... copied from the mask of another open character (a copy)
    cdef object precompute_thread                  # the thread building the segment cache ahead (None: none started)

    # the locked entry points (each takes the lock once; the parts' methods expect it held)
    cdef int initial_stacks(self, vector[node_t]& stacks) except -1 nogil
    cdef int accept_piece(self, const vector[node_t]& stacks, token_t token, const uint32_t* code_points,
                          size_t n_code_points, vector[node_t]& stacks_new) except -1 nogil
    cdef int accept_text(self, vector[node_t]& stacks, const uint32_t* code_points, size_t n_code_points) \
        except -1 nogil
    cdef int reject_tokens(self, const vector[node_t]& stacks, partial_utf8 state, const vocab_view* vocab,
                           const token_t* ids, int64_t n, vector[grammar_candidate]& rejects, bint whole_mask) \
        except -1 nogil
    cdef int mask_into(self, const vector[node_t]& stacks, uint32_t* out) except -1 nogil
    cdef int token_allowed(self, const vector[node_t]& stacks, token_t token) except -1 nogil
    cdef int partial_mask_into(self, const vector[node_t]& stacks, partial_utf8 state, const vocab_view* vocab,
                               const token_t* candidates, int64_t n, uint32_t* out) except -1 nogil
    cdef list stack_elements(self, const vector[node_t]& stacks)
    cdef int forced_bytes(self, const vector[node_t]& start, partial_utf8 partial, size_t max_bytes,
                          vector[uint8_t]& out) except -1 nogil
    cdef int32_t build_frames(self, list frames, bint whole) except -3
    cdef bint transparent_locked(self, position_t pos)
    # the mask of a state (with the GIL): which path answers it
    cdef object rejected_indices(self, const vector[node_t]& stacks, partial_utf8 partial, cnp.ndarray ids,
                                 bint whole_mask)
    cdef bint fast_into(self, const vector[node_t]& stacks, uint32_t* out) except -1
    cdef bint partial_into(self, const vector[node_t]& stacks, partial_utf8 partial, object candidates,
                           uint32_t* out) except -1
    cdef object mask_words(self, const vector[node_t]& stacks, partial_utf8 partial, bint reference)
    # (below: the lock held)
    cdef int fast_mask(self, const vector[node_t]& stacks, const trie_view* trie, uint32_t* out) except -1 nogil
    cdef int path_allowed(self, int32_t set_id, token_t token, const uint32_t* cp, partial_utf8 end) \
            except -1 nogil
    cdef void reserve_headroom(self) noexcept nogil
