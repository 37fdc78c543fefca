# The grammar IR shared by the parser and the engine: llama.cpp's element types and the flat rules.
# parser.py produces the same types as Python constants; _rules.pyx checks at import that they agree.
from libc.stdint cimport int32_t, uint32_t
from libcpp.vector cimport vector

from bankml._typedefs cimport element_value_t, position_t


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


cdef class Rules:
    cdef vector[grammar_element] elements   # every rule, each ending with END, back to back, then one END
    cdef vector[position_t] rule_start      # rule id -> index of its first element
    cdef readonly dict symbol_ids
    cdef readonly object root
    cdef readonly int32_t root_id
    cdef readonly object vocab
    cdef readonly str text
    cdef dict contexts                      # (id(vocab), max_stacks) -> the MatchContext new matchers join


cdef Rules make_rules(dict symbol_ids, list rules, root, vocab, text)
