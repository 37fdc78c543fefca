# Declarations of the GBNF parser (_gbnf.pxi, included by _rules.pyx): llama.cpp's llama_grammar_parser,
# building the rules into one pool of elements (no Python object per element) that becomes Rules' element
# array. Owns the text being parsed.
# Included by _rules.pxd (textually, as uvloop's loop.pxd includes its handles' .pxd files): these
# declarations belong to the _rules extension, not to a module of their own, and nothing cimports them by
# name. Named here without a cimport, declared by _rules.pxd before it: symbol_entry.
from libc.stdint cimport int64_t, uint32_t, uint64_t
from libcpp.string cimport string
from libcpp.unordered_map cimport unordered_map
from libcpp.vector cimport vector

from bankml.engine._elements cimport grammar_element
from bankml.engine._podvec cimport pod_vector
from bankml.engine._typedefs cimport position_t


cdef class GbnfParser:
    cdef bytes text                                 # the grammar's bytes (cut at a NUL), kept alive
    cdef const unsigned char* src
    cdef Py_ssize_t n
    cdef object vocab
    cdef vector[string] text_names                  # names written in the text, in first-seen order
    cdef unordered_map[string, uint32_t] name_index # written name -> its index in text_names
    cdef vector[uint32_t] text_name_ids             # text_names[i] -> its symbol id
    cdef pod_vector[symbol_entry] symbols           # every symbol (written or generated), in order
    cdef pod_vector[grammar_element] pool           # the rules' elements, as added (a rule added again
                                                    # leaves its old elements behind, unreferenced)
    cdef pod_vector[position_t] rule_start          # rule id -> its start in pool (-1: not added yet)
    cdef int64_t n_elements                         # elements of every rule added so far (the budget)
    cdef bint redefined                             # some rule was added twice (the pool holds orphans)
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
    cdef uint32_t get_symbol_id(self, const unsigned char* name, size_t length, uint32_t* name_index)
    cdef uint32_t generate_symbol_id(self, uint32_t base_name)
    cdef void add_rule(self, uint32_t rule_id, const vector[grammar_element]& rule)
    cdef int check_element_budget(self, int64_t adding, Py_ssize_t at) except -1
    cdef Py_ssize_t parse_alternates(self, Py_ssize_t pos, uint32_t rule_name, uint32_t rule_id,
                                     bint is_nested) except -1
    cdef Py_ssize_t parse_sequence(self, Py_ssize_t pos, uint32_t rule_name, vector[grammar_element]& rule,
                                   bint is_nested) except -1
    cdef int handle_repetitions(self, vector[grammar_element]& rule, size_t last_sym_start, uint64_t* n_prev_rules,
                                uint32_t rule_name, uint64_t min_times, uint64_t max_times,
                                Py_ssize_t at) except -1
    cdef Py_ssize_t parse_rule(self, Py_ssize_t pos) except -1
    cdef int parse(self) except -1
