# Declarations of the GBNF engine (_grammar.pyx). Names follow llama.cpp's
# src/llama-grammar.cpp where the semantics are the same.
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libcpp.unordered_map cimport unordered_map
from libcpp.vector cimport vector

from bankml._typedefs cimport element_value_t, node_t, offset_t, position_t, token_t
from bankml._utf8 cimport partial_utf8


# llama.cpp's enum llama_gretype, with its numeric values.
cdef enum llama_gretype:
    LLAMA_GRETYPE_END = 0
    LLAMA_GRETYPE_ALT = 1
    LLAMA_GRETYPE_RULE_REF = 2
    LLAMA_GRETYPE_CHAR = 3
    LLAMA_GRETYPE_CHAR_NOT = 4
    LLAMA_GRETYPE_CHAR_RNG_UPPER = 5
    LLAMA_GRETYPE_CHAR_ALT = 6
    LLAMA_GRETYPE_CHAR_ANY = 7
    LLAMA_GRETYPE_TOKEN = 8
    LLAMA_GRETYPE_TOKEN_NOT = 9


cdef struct grammar_element:
    uint32_t type
    element_value_t value


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


cdef class Rules:
    cdef vector[grammar_element] elements   # every rule, each ending with END, back to back
    cdef vector[position_t] rule_start      # rule id -> index of its first element
    cdef readonly dict symbol_ids
    cdef readonly object root
    cdef readonly int32_t root_id
    cdef readonly object vocab
    cdef readonly str text


# Borrowed pointers into a DecodedVocab, for kernels that run without the GIL.
cdef struct vocab_view:
    int64_t n_vocab
    const uint8_t* is_eog
    const uint8_t* is_empty
    const uint32_t* code_points
    const offset_t* code_point_start
    const partial_utf8* end_partial
    const uint8_t* piece_bytes
    const offset_t* piece_start


cdef class DecodedVocab:
    cdef readonly int64_t n_vocab
    cdef vector[uint8_t] is_eog
    cdef vector[uint8_t] is_empty           # piece empty or starting with NUL: never allowed
    cdef vector[uint32_t] code_points       # per token, from a fresh UTF-8 state, 0-terminated
    cdef vector[offset_t] code_point_start
    cdef vector[partial_utf8] end_partial   # the UTF-8 state each piece ends in
    cdef bytes piece_bytes                  # all pieces back to back, for decoding from a partial state
    cdef vector[offset_t] piece_start

    cdef vocab_view view(self)


cdef class Grammar:
    cdef readonly Rules rules
    cdef readonly object vocab
    cdef DecodedVocab decoded
    cdef vector[stack_node] nodes
    cdef unordered_map[uint64_t, node_t] node_ids
    cdef vector[node_t] active_stacks
    cdef partial_utf8 partial
    cdef size_t max_stacks
    # lazy grammars (llama_grammar's trigger fields)
    cdef readonly bint lazy
    cdef readonly bint awaiting_trigger
    cdef bytearray trigger_bytes
    cdef list trigger_buffer_positions
    cdef readonly tuple trigger_tokens
    cdef readonly tuple trigger_patterns
    cdef list trigger_regexes

    cdef node_t push(self, node_t parent, position_t element) except -1 nogil
    cdef int advance_stack(self, node_t stack, vector[node_t]& new_stacks) except -1 nogil
    cdef int accept_chr(self, node_t stack, uint32_t chr, vector[node_t]& new_stacks) except -1 nogil
    cdef int accept_token_stacks(self, token_t token, const uint32_t* code_points,
                                 vector[node_t]& stacks_new) except -1 nogil
    cdef int reject_candidates(self, const vector[node_t]& stacks, const vector[grammar_candidate]& candidates,
                               vector[grammar_candidate]& rejects) except -1 nogil
    cdef int reject_candidates_for_stack(self, node_t stack, const vector[grammar_candidate]& candidates,
                                         vector[grammar_candidate]& rejects) except -1 nogil
    cdef int collect_rejects(self, const vocab_view* vocab, const token_t* ids, int64_t n, vector[grammar_candidate]& rejects,
                             vector[uint32_t]& scratch) except -1 nogil
