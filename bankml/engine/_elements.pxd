# The grammar IR's element: llama.cpp's element types (enum llama_gretype) and one element of the flat rules.
# parser.py names the same types as Python constants; _rules.pyx checks at import that they agree. Shared by
# the rules (_rules.pxd), the character classes (_charclass.pxd) and the matcher (_grammar.pxd).
from libc.stdint cimport uint32_t

from bankml.engine._typedefs cimport element_value_t


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
