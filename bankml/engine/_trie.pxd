# Declarations of the vocabulary trie (_trie.pyx).
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libcpp.vector cimport vector
cimport cython

from bankml.engine._typedefs cimport offset_t

from bankml.engine._typedefs cimport token_t
from bankml.engine._utf8 cimport partial_utf8

# Children are summarized in blocks of this many, so a walk can take a block whole.
cdef enum:
    CHILD_BLOCK = 16

# sig_flags bits
cdef enum:
    SUBTREE_NON_ASCII = 1      # a code point >= 0x80 lies below the node
    SUBTREE_PARTIAL_END = 2    # a token at or below the node ends inside a UTF-8 sequence that can still complete
    SUBTREE_OVERLONG_END = 4   # a token at or below the node ends on a 0xC0/0xC1 lead byte (never completes)
    SUBTREE_ODD = 8            # a code point no text holds lies below (a surrogate, or past U+10FFFF: bytes that
                               # decode_utf8 reads without checking)


# A span of code points >= 0x80 (least, greatest) that holds none starts at NO_SPAN_LOW (and 0): every code point
# widens it.
cdef extern from *:
    """
    static const uint32_t bankml_no_span_low = 0xFFFFFFFFu;
    """
    const uint32_t NO_SPAN_LOW "bankml_no_span_low"


cdef inline void widen_span(uint32_t* span, uint32_t low, uint32_t high) noexcept nogil:
    """Widen the span (2 values) to hold [low, high] (nothing when low > high)."""
    if low <= high:
        if low < span[0]:
            span[0] = low
        if high > span[1]:
            span[1] = high


cdef inline bint is_odd_code_point(uint32_t cp) noexcept nogil:
    """A code point a token can decode to that no Unicode text holds: SUBTREE_ODD."""
    return (0xD800 <= cp <= 0xDFFF) or cp > 0x10FFFF


# The fields of a node the walk reads on every visit, packed in one 64-byte line (trie_view.nodes; the
# construction's per-field arrays are freed once this is built): a walk that meets the trie cold from memory
# (the model's forward pass evicts it between masks) pays one miss per node rather than one per field.
cdef struct trie_node:
    uint64_t below_ascii[2]    # the ASCII code points strictly below the node (bits 0-63, 64-127)
    int32_t token_lo           # first position of the node's tokens
    int32_t token_hi           # one past the last
    int32_t n_ending           # tokens whose code points end exactly here: positions token_lo .. +n_ending
    int32_t n_whole            # of the n_ending, those ending on a whole character (they come first)
    int32_t node_end           # one past the node's last descendant
    int32_t child_start        # the node's children are children[child_start:child_end]
    int32_t child_end
    int32_t first_non_ascii    # index in children of its first child with a code point >= 0x80 (child_end: none)
    int32_t below_depth        # the most code points a token takes below the node
    int32_t node_depth         # code points from the root to the node
    uint32_t node_cp           # the code point on the edge into the node (0 for the root)
    uint8_t below_flags        # SUBTREE_* bits, strictly below the node (plus unclean ends at it)
    uint8_t child_flags        # SUBTREE_* bits of the tokens strictly below the node (not those ending at it)


# Borrowed pointers into a VocabTrie, for the mask kernels that run without the GIL.
# Tokens are numbered by position in code-point order, so each node's tokens are one
# contiguous range; nodes are numbered in depth-first preorder, so each subtree is one
# contiguous node range.
cdef struct trie_view:
    int64_t n_vocab
    int64_t n_positions
    int64_t n_nodes
    const token_t* token_at            # position -> token id
    const int32_t* position_of         # token id -> position, -1 for tokens outside the trie
    const partial_utf8* end_partial    # position -> UTF-8 state its piece ends in
    const int32_t* children            # child node ids, each node's in code-point order
    const uint32_t* child_cp           # the code point of children[i], for binary search
    const uint64_t* non_ascii_ascii    # 2 words per node: ASCII code points below its non-ASCII children
    const uint8_t* non_ascii_flags     # SUBTREE_* bits over its non-ASCII children's subtrees
    const uint64_t* block_ascii        # per block of CHILD_BLOCK consecutive children (block k covers children
    const uint8_t* block_flags         # k*CHILD_BLOCK ...): 2 words of ASCII code points at or below them, and flags
    const int32_t* block_depth         # the most code points a token takes from a block's children down (theirs included)
    const int32_t* non_ascii_depth     # the same over the node's non-ASCII children
    const uint32_t* below_span         # 2 per node: the least and greatest code point >= 0x80 strictly below it
    const uint32_t* non_ascii_span     # 2 per node: the same over its non-ASCII children (theirs included)
    const uint32_t* block_span         # 2 per block: the same over the block's children (theirs included)
    const int32_t* level_start         # the nodes at depth d that have children or a token ending inside a
    const int32_t* level_nodes         # character at them: level_nodes[level_start[d]:level_start[d + 1]], in order
    int32_t n_levels                   # depths indexed (level_start has n_levels + 1 entries)
    const int32_t* ascii_level_start   # the nodes whose edge carries ASCII code point c at depth d, in order:
    const int32_t* ascii_level_nodes   # ascii_level_nodes[ascii_level_start[k]:ascii_level_start[k + 1]], k = c * n_levels + d
    const int32_t* unclean_start       # the nodes at depth d where a token ends inside a character:
    const int32_t* unclean_nodes       # unclean_nodes[unclean_start[d]:unclean_start[d + 1]], in order
    const uint64_t* longer_bits        # per depth d < n_longer, position_words words: the positions of the
    int32_t n_longer                   # tokens of more than d code points
    int64_t position_words             # (n_positions + 63) // 64
    const trie_node* nodes             # per node, its hot fields packed (64-byte aligned)


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
    cdef object _continuation_candidates

    cdef vocab_view view(self)


# The finished trie: what the walk reads (view()), nothing else. The per-node arrays are packed in trie_node
# lines; the rest are per child, per block of children, per depth and per position.
cdef class VocabTrie:
    cdef readonly int64_t n_vocab
    # positions: tokens in code-point order
    cdef vector[token_t] token_at
    cdef vector[int32_t] position_of
    cdef vector[partial_utf8] end_partial
    # children, each node's in code-point order, and summaries of groups of them
    cdef vector[int32_t] children
    cdef vector[uint32_t] child_cp
    cdef vector[uint64_t] non_ascii_ascii
    cdef vector[uint8_t] non_ascii_flags
    cdef vector[int32_t] non_ascii_depth
    cdef vector[uint64_t] block_ascii
    cdef vector[uint8_t] block_flags
    cdef vector[int32_t] block_depth
    # the span of the code points >= 0x80 below a node, its non-ASCII children, a block ((NO_SPAN_LOW, 0): none)
    cdef vector[uint32_t] below_span
    cdef vector[uint32_t] non_ascii_span
    cdef vector[uint32_t] block_span
    # per-depth indexes for the walk along a run
    cdef vector[int32_t] level_start
    cdef vector[int32_t] level_nodes
    cdef vector[int32_t] ascii_level_start
    cdef vector[int32_t] ascii_level_nodes
    cdef vector[int32_t] unclean_start
    cdef vector[int32_t] unclean_nodes
    cdef vector[uint64_t] longer_bits
    # the nodes
    cdef vector[uint8_t] packed_nodes      # the trie_node array, 64-byte aligned inside
    cdef const trie_node* packed
    cdef int64_t n_nodes_built
    cdef object _token_words

    cdef trie_view view(self)


# Builds a VocabTrie (VocabTrie.__cinit__ runs one): owns the per-node columns of the construction, in
# preorder, which the trie keeps only packed (trie_node); they go with the builder.
@cython.final
cdef class TrieBuilder:
    cdef vector[uint32_t] node_cp
    cdef vector[int32_t] node_end
    cdef vector[int32_t] token_lo
    cdef vector[int32_t] token_hi
    cdef vector[int32_t] n_ending
    cdef vector[uint64_t] below_ascii
    cdef vector[uint8_t] below_flags
    cdef vector[uint8_t] child_flags
    cdef vector[int32_t] below_depth
    cdef vector[uint32_t] below_span
    cdef vector[int32_t] child_start
    cdef vector[int32_t] first_non_ascii
    cdef vector[int32_t] node_depth

    cdef int build(self, VocabTrie trie, DecodedVocab decoded) except -1
    cdef int insert_tokens(self, VocabTrie trie, DecodedVocab decoded) except -1
    cdef int list_children(self, VocabTrie trie) except -1
    cdef int summarize_blocks(self, VocabTrie trie) except -1
    cdef int index_levels(self, VocabTrie trie) except -1
    cdef int mark_longer(self, VocabTrie trie) except -1
    cdef int pack(self, VocabTrie trie) except -1
    cdef int32_t add_node(self, uint32_t cp, int32_t position)
    cdef void close_node(self, vector[int32_t]& path, int32_t position)
