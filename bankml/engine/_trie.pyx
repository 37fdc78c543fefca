# cython: language_level=3
"""Per-vocabulary structures the mask kernels read: decoded pieces and the code-point trie.

Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License,
Copyright (c) 2023-2026 The ggml authors: the decode of each token piece
(`decode_utf8` of src/llama-grammar.cpp) and the candidate exclusions of
`llama_grammar_apply_impl` (end-of-generation tokens, empty or NUL-leading pieces).

Owns: DecodedVocab (each piece's code points, decoded once) and VocabTrie (the
tokens ordered by code points so that every trie node's tokens are one
contiguous range, with per-node summaries of what lies below). Both are built
once per Vocab and shared by every matcher over it; nothing here knows grammars.
"""
import weakref

import numpy as np
from cpython.bytes cimport PyBytes_AS_STRING
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libcpp.algorithm cimport sort
from libcpp.vector cimport vector
cimport cython

from bankml.engine._typedefs cimport offset_t, token_t
from bankml.engine._utf8 cimport decode_utf8, partial_utf8


cdef class DecodedVocab:
    """A vocabulary's pieces decoded to code points once, shared by every matcher over it."""

    def __cinit__(self, vocab):
        cdef list pieces = list(vocab.pieces)
        cdef Py_ssize_t n = len(pieces)
        cdef object eog = np.zeros(n, dtype=np.uint8)
        cdef bytes piece
        cdef const uint8_t* raw
        cdef Py_ssize_t i
        cdef offset_t offset = 0
        cdef partial_utf8 fresh
        fresh.value = 0
        fresh.n_remain = 0
        for token_id in vocab.eog_ids:
            eog[token_id] = 1
        self.n_vocab = n
        self.piece_bytes = b"".join(pieces)
        raw = <const uint8_t*>PyBytes_AS_STRING(self.piece_bytes)
        self.is_eog.resize(n)
        self.is_empty.resize(n)
        self.piece_start.resize(n + 1)
        self.code_point_start.resize(n + 1)
        self.end_partial.resize(n)
        for i in range(n):
            piece = pieces[i]
            self.is_eog[i] = eog[i]
            self.is_empty[i] = len(piece) == 0 or piece[0] == 0
            self.piece_start[i] = offset
            self.code_point_start[i] = self.code_points.size()
            self.end_partial[i] = decode_utf8(raw + offset, len(piece), fresh, self.code_points)
            offset += len(piece)
        self.piece_start[n] = offset
        self.code_point_start[n] = self.code_points.size()

    def continuation_candidates(self):
        """int32 ids of the tokens whose piece opens with a UTF-8 continuation byte, and the end-of-generation ids:
        the only tokens llama.cpp can allow while a character is still open."""
        if self._continuation_candidates is None:
            starts = np.frombuffer(self.piece_bytes, dtype=np.uint8)
            offsets = np.asarray(<offset_t[:self.n_vocab + 1]>self.piece_start.data())
            lengths = np.diff(offsets)
            first = np.zeros(self.n_vocab, dtype=np.uint8)
            nonempty = lengths > 0
            first[nonempty] = starts[offsets[:self.n_vocab][nonempty]]
            eog = np.asarray(<uint8_t[:self.n_vocab]>self.is_eog.data()).astype(bool)
            self._continuation_candidates = np.flatnonzero(
                (nonempty & ((first >> 6) == 2)) | eog).astype(np.int32)
        return self._continuation_candidates

    cdef vocab_view view(self):
        cdef vocab_view v
        v.n_vocab = self.n_vocab
        v.is_eog = self.is_eog.data()
        v.is_empty = self.is_empty.data()
        v.code_points = self.code_points.data()
        v.code_point_start = self.code_point_start.data()
        v.end_partial = self.end_partial.data()
        v.piece_bytes = <const uint8_t*>PyBytes_AS_STRING(self.piece_bytes)
        v.piece_start = self.piece_start.data()
        return v

    def __len__(self):
        return self.n_vocab


_decoded_cache = weakref.WeakKeyDictionary()
_trie_cache = weakref.WeakKeyDictionary()


def _cached(cache, vocab, build):
    # A bankml Vocab keeps what is derived from it; any other vocabulary object is
    # cached by weak reference when it allows one, and rebuilt each time otherwise.
    derived = getattr(vocab, "_derived", None)
    if isinstance(derived, dict):
        key = id(cache)
        if key not in derived:
            derived[key] = build(vocab)
        return derived[key]
    try:
        value = cache.get(vocab)
    except TypeError:
        return build(vocab)
    if value is None:
        value = build(vocab)
        cache[vocab] = value
    return value


def decoded_vocab(vocab):
    """The DecodedVocab of a Vocab, built on first use and cached for the Vocab's lifetime."""
    return _cached(_decoded_cache, vocab, DecodedVocab)


def vocab_trie(vocab):
    """The VocabTrie of a Vocab, built on first use and cached for the Vocab's lifetime."""
    return _cached(_trie_cache, vocab, lambda v: VocabTrie(decoded_vocab(v)))


# Context of the sort comparator (the build holds the GIL, so one sort runs at a time).
cdef const uint32_t* _sort_code_points
cdef const offset_t* _sort_start
cdef const partial_utf8* _sort_partial


cdef bint _code_points_less(token_t a, token_t b) noexcept nogil:
    cdef const uint32_t* pa = _sort_code_points + _sort_start[a]
    cdef const uint32_t* pb = _sort_code_points + _sort_start[b]
    while pa[0] == pb[0] and pa[0] != 0:
        pa += 1
        pb += 1
    if pa[0] != pb[0]:
        return pa[0] < pb[0]   # the 0 terminator sorts a prefix before its extensions
    if _sort_partial[a].n_remain != _sort_partial[b].n_remain:
        return _sort_partial[a].n_remain < _sort_partial[b].n_remain
    if _sort_partial[a].value != _sort_partial[b].value:
        return _sort_partial[a].value < _sort_partial[b].value
    return a < b


# The depths longer_bits covers (a run ending deeper is finished node by node).
cdef int32_t MAX_LONGER_DEPTHS = 64


@cython.final
cdef class TrieBuilder:
    """Builds a VocabTrie: owns the per-node columns the construction fills (in preorder) and writes the
    arrays the walk reads into the trie, the per-node ones packed into trie_node lines. The columns go with
    the builder once the trie is built."""

    cdef int build(self, VocabTrie trie, DecodedVocab decoded) except -1:
        self.insert_tokens(trie, decoded)
        self.list_children(trie)
        self.summarize_blocks(trie)
        self.index_levels(trie)
        self.mark_longer(trie)
        self.pack(trie)
        return 0

    cdef int insert_tokens(self, VocabTrie trie, DecodedVocab decoded) except -1:
        """Order the tokens by code points (trie.token_at, position_of, end_partial) and add their nodes,
        each closed (its range and what lies below it summed) when the next token leaves it."""
        global _sort_code_points, _sort_start, _sort_partial
        cdef int64_t n = decoded.n_vocab
        cdef vector[token_t] order
        cdef token_t token
        cdef int64_t i, position
        cdef const uint32_t* cps
        cdef const uint32_t* previous = NULL
        cdef int32_t depth, common, node
        cdef vector[int32_t] path        # node at each depth of the current token
        trie.n_vocab = n
        trie.position_of.assign(n, -1)
        for i in range(n):
            if decoded.is_eog[i] or decoded.is_empty[i] or decoded.end_partial[i].n_remain < 0:
                continue
            order.push_back(<token_t>i)
        _sort_code_points = decoded.code_points.data()
        _sort_start = decoded.code_point_start.data()
        _sort_partial = decoded.end_partial.data()
        sort(order.begin(), order.end(), _code_points_less)
        trie.token_at = order
        for position in range(<int64_t>order.size()):
            trie.position_of[order[position]] = <int32_t>position
            trie.end_partial.push_back(decoded.end_partial[order[position]])
        self.add_node(0, 0)  # the root: the empty prefix
        path.push_back(0)
        for position in range(<int64_t>order.size()):
            token = order[position]
            cps = decoded.code_points.data() + decoded.code_point_start[token]
            common = 0
            if previous != NULL:
                while previous[common] != 0 and previous[common] == cps[common]:
                    common += 1
            while <int32_t>path.size() > common + 1:
                self.close_node(path, <int32_t>position)
            depth = common
            while cps[depth] != 0:
                path.push_back(self.add_node(cps[depth], <int32_t>position))
                depth += 1
            node = path.back()
            # Tokens that end at a node sort before the ones that go on, so they open its range.
            self.n_ending[node] += 1
            if decoded.end_partial[token].n_remain == 1 and decoded.end_partial[token].value < 2:
                self.below_flags[node] |= SUBTREE_OVERLONG_END
            elif decoded.end_partial[token].n_remain != 0:
                self.below_flags[node] |= SUBTREE_PARTIAL_END
            previous = cps
        while not path.empty():
            self.close_node(path, <int32_t>order.size())
        return 0

    cdef int list_children(self, VocabTrie trie) except -1:
        """Child lists, for the walk to jump straight to the children a stack can match, and, per node, a
        summary of its non-ASCII children (they sort last) taken together."""
        cdef int32_t n_nodes = <int32_t>self.node_cp.size()
        cdef int32_t node, child, depth
        cdef uint64_t ascii_lo, ascii_hi
        cdef uint8_t flags
        cdef uint32_t span[2]
        for node in range(n_nodes):
            self.child_start.push_back(<int32_t>trie.children.size())
            span[0] = NO_SPAN_LOW
            span[1] = 0
            self.first_non_ascii.push_back(-1)
            ascii_lo = 0
            ascii_hi = 0
            flags = 0
            depth = 0
            child = node + 1
            while child < self.node_end[node]:
                if self.node_cp[child] >= 128:
                    depth = max(depth, self.below_depth[child] + 1)
                    if self.first_non_ascii[node] < 0:
                        self.first_non_ascii[node] = <int32_t>trie.children.size()
                    ascii_lo |= self.below_ascii[2 * child]
                    ascii_hi |= self.below_ascii[2 * child + 1]
                    flags |= self.below_flags[child] | SUBTREE_NON_ASCII
                    if is_odd_code_point(self.node_cp[child]):
                        flags |= SUBTREE_ODD
                    widen_span(span, self.node_cp[child], self.node_cp[child])
                    widen_span(span, self.below_span[2 * child], self.below_span[2 * child + 1])
                trie.children.push_back(child)
                trie.child_cp.push_back(self.node_cp[child])
                child = self.node_end[child]
            if self.first_non_ascii[node] < 0:
                self.first_non_ascii[node] = <int32_t>trie.children.size()
            trie.non_ascii_ascii.push_back(ascii_lo)
            trie.non_ascii_ascii.push_back(ascii_hi)
            trie.non_ascii_flags.push_back(flags)
            trie.non_ascii_depth.push_back(depth)
            trie.non_ascii_span.push_back(span[0])
            trie.non_ascii_span.push_back(span[1])
        trie.below_span = self.below_span
        self.child_start.push_back(<int32_t>trie.children.size())
        return 0

    cdef int summarize_blocks(self, VocabTrie trie) except -1:
        """Per block of CHILD_BLOCK consecutive children: the ASCII code points at or below them, their flags
        and the most code points a token takes from them down, so a walk can take a block whole."""
        cdef int64_t block, index
        cdef int32_t child, depth
        cdef uint64_t ascii_lo, ascii_hi
        cdef uint8_t flags
        cdef uint32_t span[2]
        for block in range((<int64_t>trie.children.size() + CHILD_BLOCK - 1) // CHILD_BLOCK):
            ascii_lo = 0
            ascii_hi = 0
            flags = 0
            depth = 0
            span[0] = NO_SPAN_LOW
            span[1] = 0
            for index in range(block * CHILD_BLOCK, min((block + 1) * CHILD_BLOCK, <int64_t>trie.children.size())):
                child = trie.children[index]
                depth = max(depth, self.below_depth[child] + 1)
                ascii_lo |= self.below_ascii[2 * child]
                ascii_hi |= self.below_ascii[2 * child + 1]
                flags |= self.below_flags[child]
                widen_span(span, self.below_span[2 * child], self.below_span[2 * child + 1])
                if self.node_cp[child] < 64:
                    ascii_lo |= (<uint64_t>1) << self.node_cp[child]
                elif self.node_cp[child] < 128:
                    ascii_hi |= (<uint64_t>1) << (self.node_cp[child] - 64)
                else:
                    flags |= SUBTREE_NON_ASCII
                    widen_span(span, self.node_cp[child], self.node_cp[child])
                    if is_odd_code_point(self.node_cp[child]):
                        flags |= SUBTREE_ODD
            trie.block_ascii.push_back(ascii_lo)
            trie.block_ascii.push_back(ascii_hi)
            trie.block_flags.push_back(flags)
            trie.block_depth.push_back(depth)
            trie.block_span.push_back(span[0])
            trie.block_span.push_back(span[1])
        return 0

    cdef int index_levels(self, VocabTrie trie) except -1:
        """Each node's depth, and the per-depth indexes a walk along a run reads (level_*, ascii_level_*,
        unclean_*)."""
        cdef int32_t n_nodes = <int32_t>self.node_cp.size()
        cdef int32_t node, depth
        cdef int64_t index, position, n_levels, key
        cdef vector[int32_t] level_count
        cdef vector[int32_t] unclean
        # Per depth, the nodes a walk along a bounded run must still visit where the run ends (the others,
        # leaves whose tokens end on a whole character, are accepted there whatever the set): preorder ids,
        # so a subtree's nodes at one depth are one slice, found by binary search.
        self.node_depth.assign(n_nodes, 0)
        for node in range(n_nodes):   # preorder: a parent's depth is set before its children's
            for index in range(self.child_start[node], self.child_start[node + 1]):
                self.node_depth[trie.children[index]] = self.node_depth[node] + 1
        level_count.assign(self.below_depth[0] + 2 if n_nodes else 1, 0)
        for node in range(n_nodes):
            if self.child_start[node + 1] > self.child_start[node] or \
                    (self.below_flags[node] & (SUBTREE_PARTIAL_END | SUBTREE_OVERLONG_END)):
                level_count[self.node_depth[node]] += 1
        trie.level_start.assign(level_count.size() + 1, 0)
        for depth in range(<int32_t>level_count.size()):
            trie.level_start[depth + 1] = trie.level_start[depth] + level_count[depth]
        trie.level_nodes.assign(trie.level_start[level_count.size()], 0)
        level_count.assign(level_count.size(), 0)
        for node in range(n_nodes):
            if self.child_start[node + 1] > self.child_start[node] or \
                    (self.below_flags[node] & (SUBTREE_PARTIAL_END | SUBTREE_OVERLONG_END)):
                depth = self.node_depth[node]
                trie.level_nodes[trie.level_start[depth] + level_count[depth]] = node
                level_count[depth] += 1
        # Per ASCII code point and depth, the nodes whose edge carries it (preorder ids again): where a
        # subtree leaves a run's class, found without walking the subtree.
        n_levels = level_count.size()
        level_count.assign(128 * n_levels, 0)
        for node in range(1, n_nodes):
            if self.node_cp[node] < 128:
                level_count[self.node_cp[node] * n_levels + self.node_depth[node]] += 1
        trie.ascii_level_start.assign(128 * n_levels + 1, 0)
        for key in range(128 * n_levels):
            trie.ascii_level_start[key + 1] = trie.ascii_level_start[key] + level_count[key]
        trie.ascii_level_nodes.assign(trie.ascii_level_start[128 * n_levels], 0)
        level_count.assign(128 * n_levels, 0)
        for node in range(1, n_nodes):
            if self.node_cp[node] < 128:
                key = self.node_cp[node] * n_levels + self.node_depth[node]
                trie.ascii_level_nodes[trie.ascii_level_start[key] + level_count[key]] = node
                level_count[key] += 1
        # Per depth, the nodes where a token ends inside a character (the set after a run decides those).
        trie.unclean_start.assign(n_levels + 1, 0)
        for node in range(n_nodes):
            for position in range(self.token_lo[node], self.token_lo[node] + self.n_ending[node]):
                if trie.end_partial[position].n_remain != 0:
                    unclean.push_back(node)
                    trie.unclean_start[self.node_depth[node] + 1] += 1
                    break
        for depth in range(<int32_t>n_levels):
            trie.unclean_start[depth + 1] += trie.unclean_start[depth]
        trie.unclean_nodes.assign(unclean.size(), 0)
        level_count.assign(n_levels, 0)
        for index in range(<int64_t>unclean.size()):
            depth = self.node_depth[unclean[index]]
            trie.unclean_nodes[trie.unclean_start[depth] + level_count[depth]] = unclean[index]
            level_count[depth] += 1
        return 0

    cdef int mark_longer(self, VocabTrie trie) except -1:
        cdef int32_t n_nodes = <int32_t>self.node_cp.size()
        cdef int64_t n_levels = <int64_t>trie.level_start.size() - 1
        cdef int32_t node, depth, n_longer
        cdef int64_t position, words
        # Per depth d (up to MAX_LONGER_DEPTHS), the positions of the tokens longer than d code points: what
        # a run ending d code points down leaves to the set after it, cleared from a subtree's range in words.
        words = (<int64_t>trie.token_at.size() + 63) >> 6
        n_longer = <int32_t>min(<int64_t>MAX_LONGER_DEPTHS, n_levels)
        trie.longer_bits.assign(n_longer * words, 0)
        for node in range(n_nodes):
            for depth in range(min(self.node_depth[node], n_longer)):
                for position in range(self.token_lo[node], self.token_lo[node] + self.n_ending[node]):
                    trie.longer_bits[depth * words + (position >> 6)] |= (<uint64_t>1) << (position & 63)
        return 0

    cdef int pack(self, VocabTrie trie) except -1:
        cdef int32_t n_nodes = <int32_t>self.node_cp.size()
        cdef int32_t node
        cdef size_t address
        cdef trie_node* packed
        # The walk's per-node fields, packed (trie_node: 62 bytes of fields, padded to one 64-byte line).
        assert sizeof(trie_node) == 64
        trie.packed_nodes.assign(<size_t>n_nodes * sizeof(trie_node) + 64, 0)
        address = <size_t>trie.packed_nodes.data()
        packed = <trie_node*>((address + 63) & ~(<size_t>63))
        for node in range(n_nodes):
            packed[node].below_ascii[0] = self.below_ascii[2 * node]
            packed[node].below_ascii[1] = self.below_ascii[2 * node + 1]
            packed[node].token_lo = self.token_lo[node]
            packed[node].token_hi = self.token_hi[node]
            packed[node].n_ending = self.n_ending[node]
            packed[node].n_whole = 0
            while packed[node].n_whole < self.n_ending[node] and \
                    trie.end_partial[self.token_lo[node] + packed[node].n_whole].n_remain == 0:
                packed[node].n_whole += 1
            packed[node].node_end = self.node_end[node]
            packed[node].child_start = self.child_start[node]
            packed[node].child_end = self.child_start[node + 1]
            packed[node].first_non_ascii = self.first_non_ascii[node]
            packed[node].below_depth = self.below_depth[node]
            packed[node].node_depth = self.node_depth[node]
            packed[node].node_cp = self.node_cp[node]
            packed[node].below_flags = self.below_flags[node]
            packed[node].child_flags = self.child_flags[node]
        trie.packed = packed
        trie.n_nodes_built = n_nodes
        return 0

    cdef int32_t add_node(self, uint32_t cp, int32_t position):
        self.node_cp.push_back(cp)
        self.node_end.push_back(0)
        self.token_lo.push_back(position)
        self.token_hi.push_back(position)
        self.n_ending.push_back(0)
        self.below_ascii.push_back(0)
        self.below_ascii.push_back(0)
        self.below_flags.push_back(0)
        self.child_flags.push_back(0)
        self.below_depth.push_back(0)
        self.below_span.push_back(NO_SPAN_LOW)
        self.below_span.push_back(0)
        return <int32_t>(self.node_cp.size() - 1)

    cdef void close_node(self, vector[int32_t]& path, int32_t position):
        cdef int32_t node = path.back()
        cdef int32_t parent
        cdef uint32_t cp = self.node_cp[node]
        path.pop_back()
        self.token_hi[node] = position
        self.node_end[node] = <int32_t>self.node_cp.size()
        if path.empty():
            return
        parent = path.back()
        if self.below_depth[node] + 1 > self.below_depth[parent]:
            self.below_depth[parent] = self.below_depth[node] + 1
        self.below_ascii[2 * parent] |= self.below_ascii[2 * node]
        self.below_ascii[2 * parent + 1] |= self.below_ascii[2 * node + 1]
        self.below_flags[parent] |= self.below_flags[node]
        self.child_flags[parent] |= self.below_flags[node]
        widen_span(&self.below_span[2 * parent], self.below_span[2 * node], self.below_span[2 * node + 1])
        if cp < 64:
            self.below_ascii[2 * parent] |= (<uint64_t>1) << cp
        elif cp < 128:
            self.below_ascii[2 * parent + 1] |= (<uint64_t>1) << (cp - 64)
        else:
            widen_span(&self.below_span[2 * parent], cp, cp)
            self.below_flags[parent] |= SUBTREE_NON_ASCII
            self.child_flags[parent] |= SUBTREE_NON_ASCII
            if is_odd_code_point(cp):
                self.below_flags[parent] |= SUBTREE_ODD
                self.child_flags[parent] |= SUBTREE_ODD


cdef class VocabTrie:
    """The tokens a grammar can ever allow, in a trie of their code points.

    Left out: end-of-generation tokens (llama.cpp decides them by the stacks,
    not the grammar), empty or NUL-leading pieces (never allowed) and pieces that
    decode to an invalid sequence (never allowed from a complete-character state).
    Built by a TrieBuilder; holds only the arrays the walk reads (view()).
    """

    def __cinit__(self, DecodedVocab decoded):
        cdef TrieBuilder builder = TrieBuilder()
        builder.build(self, decoded)
        # the candidates inside a character, worked out here (about a millisecond of numpy on Llama 3) rather than
        # in the first mask of a state left inside one
        decoded.continuation_candidates()

    cdef trie_view view(self):
        cdef trie_view v
        v.n_vocab = self.n_vocab
        v.n_positions = self.token_at.size()
        v.n_nodes = self.n_nodes_built
        v.token_at = self.token_at.data()
        v.position_of = self.position_of.data()
        v.end_partial = self.end_partial.data()
        v.children = self.children.data()
        v.child_cp = self.child_cp.data()
        v.non_ascii_ascii = self.non_ascii_ascii.data()
        v.non_ascii_flags = self.non_ascii_flags.data()
        v.block_ascii = self.block_ascii.data()
        v.block_flags = self.block_flags.data()
        v.block_depth = self.block_depth.data()
        v.non_ascii_depth = self.non_ascii_depth.data()
        v.below_span = self.below_span.data()
        v.non_ascii_span = self.non_ascii_span.data()
        v.block_span = self.block_span.data()
        v.level_start = self.level_start.data()
        v.level_nodes = self.level_nodes.data()
        v.n_levels = <int32_t>self.level_start.size() - 1
        v.ascii_level_start = self.ascii_level_start.data()
        v.ascii_level_nodes = self.ascii_level_nodes.data()
        v.unclean_start = self.unclean_start.data()
        v.unclean_nodes = self.unclean_nodes.data()
        v.longer_bits = self.longer_bits.data()
        v.position_words = (<int64_t>self.token_at.size() + 63) >> 6
        v.n_longer = <int32_t>(self.longer_bits.size() // v.position_words) if v.position_words else 0
        v.nodes = self.packed
        return v

    @property
    def token_words(self):
        """uint32 words with the bit of every token in the trie set (computed once, read-only)."""
        if self._token_words is None:
            allowed = np.zeros(((self.n_vocab + 31) // 32) * 32, dtype=bool)
            allowed[self.order()] = True
            words = np.packbits(allowed, bitorder="little").view(np.uint32)
            words.flags.writeable = False
            self._token_words = words
        return self._token_words

    @property
    def max_depth(self):
        """The most code points any token in the trie takes."""
        return self.packed[0].below_depth if self.n_nodes_built else 0

    @property
    def n_nodes(self):
        return self.n_nodes_built

    @property
    def n_positions(self):
        return self.token_at.size()

    def order(self):
        """Token ids in trie order (position -> id), as a NumPy array."""
        return np.asarray(<token_t[:self.token_at.size()]>self.token_at.data()).copy()

    def memory_bytes(self):
        return (self.token_at.size() * 4 + self.position_of.size() * 4 + self.end_partial.size() * 8
                + self.children.size() * 4 + self.child_cp.size() * 4
                + self.non_ascii_ascii.size() * 8 + self.non_ascii_flags.size() + self.non_ascii_depth.size() * 4
                + self.block_ascii.size() * 8 + self.block_flags.size() + self.block_depth.size() * 4
                + (self.below_span.size() + self.non_ascii_span.size() + self.block_span.size()) * 4
                + self.level_nodes.size() * 4 + self.level_start.size() * 4
                + self.ascii_level_nodes.size() * 4 + self.ascii_level_start.size() * 4
                + self.unclean_nodes.size() * 4 + self.unclean_start.size() * 4 + self.longer_bits.size() * 8
                + self.packed_nodes.size())
