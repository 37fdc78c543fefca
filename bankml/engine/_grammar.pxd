# Declarations of the GBNF engine (_grammar.pyx), one .pxd per part as its .pxi is one file per part: the
# parts are one extension (one C translation unit, so their calls to one another are direct C calls), and
# this header includes their declarations in the order they use one another. Names follow llama.cpp's
# src/llama-grammar.cpp where the semantics are the same. The grammar IR (element types, Rules) is
# _rules.pxd's; character classes are _charclass.pxd's, bit sets _bits.pxd's.
#
# Each part owns one kind of id and holds the parts it uses (composition, no subclass chain); every class
# but MatchContext and Grammar is final.
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from bankml.engine._flatmap cimport flat_map
from bankml.engine._zeroarray cimport zero_array
from libcpp.unordered_set cimport unordered_set
from libcpp.utility cimport pair
from libcpp.vector cimport vector
from cpython.pythread cimport PyThread_type_lock
cimport numpy as cnp
cimport cython

from bankml.engine._typedefs cimport element_value_t, node_t, offset_t, position_t, token_t
from bankml.engine._utf8 cimport partial_utf8
from bankml.engine._trie cimport DecodedVocab, VocabTrie, trie_view, vocab_view
from bankml.engine._elements cimport (LLAMA_GRETYPE_ALT, LLAMA_GRETYPE_CHAR, LLAMA_GRETYPE_CHAR_ANY,
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
