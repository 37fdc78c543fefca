# The grammar IR shared by the parser and the engine: llama.cpp's element types and the flat rules.
# parser.py names the same types as Python constants; _rules.pyx checks at import that they agree.
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libcpp.string cimport string
from libcpp.unordered_map cimport unordered_map
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


cdef Rules new_rules(dict symbol_ids, root, vocab, text)
cdef int flatten_into(Rules self, vector[vector[grammar_element]]& rules) except -1
cdef Rules make_rules(dict symbol_ids, list rules, root, vocab, text)
# llama.cpp's rules_may_be_empty (an alternative empty as written) and nullability (the least fixpoint),
# per rule id.
cdef vector[uint8_t] rules_may_be_empty(Rules rules)
cdef vector[uint8_t] rules_nullable(Rules rules, const vector[uint8_t]& may_be_empty)


# The GBNF parser (_gbnf.pxi, included by _rules.pyx): llama.cpp's llama_grammar_parser, building
# the rules as C++ vectors of elements that Rules.parse flattens without a Python object per element.
cdef class GbnfParser:
    cdef bytes text                                 # the grammar's bytes (cut at a NUL), kept alive
    cdef const unsigned char* src
    cdef Py_ssize_t n
    cdef object vocab
    cdef vector[string] names                       # symbol names in first-insertion order (a dict's order)
    cdef vector[uint32_t] name_ids                  # names[i] -> its symbol id (overwritten as std::map does)
    cdef unordered_map[string, size_t] name_slot    # name -> its index in names
    cdef vector[vector[grammar_element]] rules      # rule id -> its elements, END included
    cdef int64_t n_elements                         # elements of every rule added so far (the budget)
    cdef Py_ssize_t n_open_groups                   # groups being parsed (the nesting bound)

    cdef inline unsigned char at(self, Py_ssize_t pos) noexcept
    cdef Py_ssize_t parse_space(self, Py_ssize_t pos, bint newline_ok) noexcept
    cdef Py_ssize_t parse_name(self, Py_ssize_t pos) except -1
    cdef Py_ssize_t parse_int(self, Py_ssize_t pos) except -1
    cdef Py_ssize_t parse_hex(self, Py_ssize_t pos, int size, uint32_t* value) except -1
    cdef Py_ssize_t decode_char(self, Py_ssize_t pos, uint32_t* value) noexcept
    cdef Py_ssize_t parse_char(self, Py_ssize_t pos, uint32_t* value) except -1
    cdef Py_ssize_t parse_token(self, Py_ssize_t pos, uint32_t* value) except -1
    cdef uint64_t stoull(self, Py_ssize_t start, Py_ssize_t end, str what) except? 0
    cdef uint32_t get_symbol_id(self, const string& name)
    cdef uint32_t generate_symbol_id(self, const string& base_name)
    cdef void add_rule(self, uint32_t rule_id, vector[grammar_element]& rule)
    cdef int check_element_budget(self, int64_t adding, Py_ssize_t at) except -1
    cdef Py_ssize_t parse_alternates(self, Py_ssize_t pos, const string& rule_name, uint32_t rule_id,
                                     bint is_nested) except -1
    cdef Py_ssize_t parse_sequence(self, Py_ssize_t pos, const string& rule_name, vector[grammar_element]& rule,
                                   bint is_nested) except -1
    cdef int handle_repetitions(self, vector[grammar_element]& rule, size_t last_sym_start, uint64_t* n_prev_rules,
                                const string& rule_name, uint64_t min_times, uint64_t max_times,
                                Py_ssize_t at) except -1
    cdef Py_ssize_t parse_rule(self, Py_ssize_t pos) except -1
    cdef int parse(self) except -1
    cdef dict symbol_dict(self)
