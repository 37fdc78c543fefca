# Declarations of the GBNF engine (_grammar.pyx), one .pxd per part as its .pxi is one file per part: the
# parts are one extension (one C translation unit, so their calls to one another are direct C calls), and
# this header includes their declarations in the order they use one another. Names follow llama.cpp's
# src/llama-grammar.cpp where the semantics are the same. The grammar IR (element types, Rules) is
# _rules.pxd's; character classes are _charclass.pxd's, bit sets _bits.pxd's.
#
# Each part owns one kind of id and holds the parts it uses (composition, no subclass chain); every class
# but MatchContext and Grammar is final.
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from bankml.engine._batchpool cimport batch_pool, batch_task
from bankml.engine._flatmap cimport flat_map
from bankml.engine._zeroarray cimport zero_array
from libcpp.unordered_set cimport unordered_set
from libcpp.utility cimport pair
from libcpp.vector cimport vector
from cpython.pythread cimport PyThread_type_lock
from cpython.ref cimport PyObject
cimport numpy as cnp
cimport cython

from bankml.engine._typedefs cimport element_value_t, node_t, offset_t, position_t, token_t
from bankml.engine._utf8 cimport partial_utf8
from bankml.engine._trie cimport DecodedVocab, VocabTrie, trie_view, vocab_view
from bankml.engine._elements cimport (LLAMA_GRETYPE_ALT, LLAMA_GRETYPE_CHAR, LLAMA_GRETYPE_CHAR_ALT, LLAMA_GRETYPE_CHAR_ANY,
                                      LLAMA_GRETYPE_CHAR_NOT, LLAMA_GRETYPE_END, LLAMA_GRETYPE_RULE_REF,
                                      LLAMA_GRETYPE_TOKEN, LLAMA_GRETYPE_TOKEN_NOT, grammar_element)
from bankml.engine._rules cimport Rules

include "_stacks.pxd"      # StackPool: node ids (stack_node, grammar_candidate)
include "_stacksets.pxd"   # StackSets: set ids (set_summary, its flags and sentinels)
include "_walk.pxd"        # TrieWalk: trie positions (walk_state, run exceptions)
include "_segments.pxd"    # SegmentCache: entry ids (segment_entry, its scratch and counters)
include "_maskcache.pxd"   # MaskCache: mask slots
include "_context.pxd"     # MatchContext: the parts above under one lock
include "_precompute.pxd"  # the rule analyses the segment cache is built from
include "_rollback.pxd"    # RollbackRing: ring slots
include "_matcher.pxd"     # Grammar: one sequence's state


# One row of a batch fill (_batch.pxi): what a pool thread needs to fill it without the GIL.
cdef struct mask_row:
    PyObject* ctx                  # the matcher's MatchContext (borrowed: the batch's list of matchers holds it)
    const vector[node_t]* stacks   # the matcher's stacks (unchanged: the batch holds the matcher's lock)
    uint32_t* out                  # its bitmask row
    const token_t* candidates      # ROW_PARTIAL: the continuation candidates (DecodedVocab's cached array)
    int64_t n_candidates
    vocab_view vocab               # ROW_PARTIAL
    partial_utf8 partial           # ROW_PARTIAL: the open character
    int64_t n_vocab
    int kind                       # ROW_* (_batch.pxi)
    int status                     # 0 written; else answered after the batch, with the GIL


# A batch of logits rows to mask (apply_token_bitmask_inplace): row k of masks onto logits row logit_rows[k].
cdef struct apply_job:
    float* logits
    int64_t logit_stride           # floats from one logits row to the next
    const int64_t* logit_rows
    int64_t n_columns
    const uint32_t* masks
    int64_t mask_stride            # words from one bitmask row to the next
    int64_t width                  # words per bitmask row


# the process's pool of mask threads: the calling thread and `threads` of these fill a batch's rows
@cython.final
cdef class BatchPool:
    cdef batch_pool* pool
    cdef readonly int pid          # the process that made it (a forked child makes its own)
    cdef list threads

    cdef int grow(self, int helpers) except -1
    cdef void run(self, batch_task task, void* job, int64_t n_items, int helpers) noexcept nogil
