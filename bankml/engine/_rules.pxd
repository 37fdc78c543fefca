# The flat rules (llama.cpp's grammar after parsing) and the parser's entry points; the element types
# are _elements.pxd's.
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libcpp.string cimport string
from libcpp.unordered_map cimport unordered_map
from libcpp.vector cimport vector

from bankml.engine._elements cimport grammar_element
from bankml.engine._podvec cimport pod_vector
from bankml.engine._typedefs cimport element_value_t, position_t


# One symbol in llama.cpp's symbol_ids, in first-insertion order: a name written in the text
# (text_names[name]), or one generate_symbol_id made (text_names[name] + "_" + str(id)). Generated
# names hold a '_', which GBNF names cannot, so they never meet a written name and are never looked up.
cdef struct symbol_entry:
    uint32_t name
    uint32_t id
    bint generated


cdef class Rules:
    cdef pod_vector[grammar_element] elements  # every rule, each ending with END, one after another, then one END
    cdef pod_vector[position_t] rule_start  # rule id -> index of its first element
    cdef vector[string] text_names          # the names written in the text
    cdef pod_vector[symbol_entry] symbols   # symbol_ids, in order (the dict is built on first use)
    cdef dict _symbol_ids
    cdef readonly object root
    cdef readonly int32_t root_id
    cdef readonly object vocab
    cdef readonly str text
    cdef dict contexts                      # (id(vocab), max_stacks) -> the MatchContext new matchers join
    cdef vector[uint8_t] nullable           # per rule id, whether it matches the empty string (rules_nullable_of),
    cdef bint nullable_known                # computed once: by the left-recursion check or the first matcher


cdef Rules new_rules(root, vocab, text)
cdef Rules make_rules(dict symbol_ids, list rules, root, vocab, text)
# Per rule id, whether it can match the empty string (the least fixpoint), computed on first use and
# kept on the Rules (parse's left-recursion check and each new MatchContext's segment cache both need it).
cdef const vector[uint8_t]* rules_nullable_of(Rules rules) except NULL


include "_gbnf.pxd"      # GbnfParser: the GBNF text read into rules
