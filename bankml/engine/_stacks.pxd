# Declarations of the stack-node pool (_stacks.pxi): hash-consed persistent stacks, llama.cpp's reference
# path over them and the work budgets. Owns node ids.
# Included by _grammar.pxd (textually, as uvloop's loop.pxd includes its handles' .pxd files): these
# declarations belong to the _grammar extension, not to a module of their own, and nothing cimports them
# by name.
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from libcpp.unordered_set cimport unordered_set
from libcpp.vector cimport vector
cimport cython

from bankml.engine._flatmap cimport flat_map
from bankml.engine._rules cimport Rules
from bankml.engine._trie cimport vocab_view
from bankml.engine._typedefs cimport node_t, position_t, token_t
from bankml.engine._utf8 cimport partial_utf8


# One node of a matcher's persistent stack tree: a stack is the path from a node
# to the root. Nodes are hash-consed, so two equal stacks are one node id and
# comparing stacks is comparing integers.
cdef struct stack_node:
    position_t element   # top of this stack: an index into Rules.elements
    node_t parent        # the stack below it; EMPTY_STACK at the bottom


# A token being checked against the stacks: the code points still to match
# (0-terminated) and the partial UTF-8 state its piece ends in.
cdef struct grammar_candidate:
    int64_t index
    const uint32_t* code_points
    partial_utf8 partial
    token_t id


@cython.final
cdef class StackPool:
    # node ids: the hash-consed stack nodes, llama.cpp's reference path over them, and the work budgets
    cdef readonly Rules rules
    cdef vector[stack_node] nodes
    cdef flat_map[uint64_t, node_t] node_ids
    cdef size_t max_stacks
    cdef vector[node_t] advance_todo, advance_seen   # scratch of advance_stack, no allocation per call
    cdef unordered_set[node_t] advance_seen_set    # advance_stack's seen once it outgrows a linear search
    # work budgets: what the current fast mask (work) or reference mask (reference_work) has done, and the
    # fast path's limit (past it the mask goes to the reference path); INT64_MAX outside a fast mask
    cdef int64_t work, work_limit, reference_work
    cdef int64_t fast_work_budget                  # FAST_WORK_BUDGET unless a test changed it
    cdef readonly int64_t max_fast_work            # the most work a completed fast mask took (for the figures)
    cdef readonly int64_t last_reference_work      # the work of the last completed reference mask

    cdef int accept_token_stacks(self, const vector[node_t]& stacks, token_t token, const uint32_t* code_points,
                                 size_t n_code_points, vector[node_t]& stacks_new) except -1 nogil
    cdef int collect_rejects(self, const vector[node_t]& stacks, partial_utf8 state, const vocab_view* vocab,
                             const token_t* ids, int64_t n, vector[grammar_candidate]& rejects,
                             vector[uint32_t]& scratch) except -1 nogil
    cdef node_t push(self, node_t parent, position_t element) except -1 nogil
    cdef int charge(self, int64_t steps) except -1 nogil
    cdef void reserve_headroom(self) noexcept nogil
    cdef int advance_stack(self, node_t stack, vector[node_t]& new_stacks) except -1 nogil
    cdef int accept_chr(self, node_t stack, uint32_t chr, vector[node_t]& new_stacks) except -1 nogil
    cdef int reject_candidates(self, const vector[node_t]& stacks, const vector[grammar_candidate]& candidates,
                               vector[grammar_candidate]& rejects) except -1 nogil
    cdef int reject_candidates_for_stack(self, node_t stack, const vector[grammar_candidate]& candidates,
                                         vector[grammar_candidate]& rejects) except -1 nogil
    cdef int forced_bytes(self, const vector[node_t]& start, partial_utf8 partial, size_t max_bytes,
                          vector[uint8_t]& out) except -1 nogil
