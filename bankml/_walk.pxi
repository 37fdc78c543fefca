# Included by _grammar.pyx (one extension, so the hot calls stay within one C translation unit).
# The walk of the vocabulary trie with a stack set: marks the accepted tokens' trie positions in
# position_bits, taking whole subtrees and blocks where the set's class allows; a walk's mode is the
# walk_state it is given. Owns trie positions (position_bits).
# Declarations: _grammar.pxd.


cdef class TrieWalk:
    """The trie walk with a stack set, marking accepted trie positions; its mode is the walk_state it is given."""

    def __cinit__(self, StackPool pool, StackSets sets, VocabTrie trie):
        self.pool = pool
        self.sets = sets
        self.trie = trie
        if trie is not None:
            words = trie.token_words
            self.trie_token_words.resize(words.shape[0])
            if words.shape[0]:
                memcpy(self.trie_token_words.data(), cnp.PyArray_DATA(words), words.shape[0] * sizeof(uint32_t))
            self.trie_arrays = trie.view()

    cdef void clear_marks(self) noexcept nogil:
        """Forget every mark (after a walk that stopped part way: position_bits must be all zero again)."""
        memset(self.position_bits.data(), 0, self.position_bits.size() * sizeof(uint64_t))
        self.n_marked = 0

    cdef void ensure_position_bits(self) noexcept nogil:
        """position_bits sized to the trie (all zero between walks)."""
        if self.position_bits.size() != <size_t>((self.trie_arrays.n_positions + 63) >> 6):
            self.position_bits.assign((self.trie_arrays.n_positions + 63) >> 6, 0)

    cdef int trie_visit(self, const trie_view* trie, int32_t node, int32_t set_id, walk_state* walk) except -1 nogil:
        """Mark (in position_bits) the tokens below a trie node that the stack set accepts.

        The set holds the stacks after the node's code points. A token ends here
        accepted if it ends on a whole character, or if a stack could take the
        rest of its last character; a token terminal on a stack accepts by id
        whatever text remains; a child subtree is entered with the set that its
        code point leads to, or taken whole when every code point below it leads
        back to that same set and every token in it ends on a whole character.
        """
        cdef const grammar_element* elements = self.pool.rules.elements.data()
        cdef const grammar_element* top
        cdef uint64_t* bits = self.position_bits.data()
        cdef int64_t lo = trie.token_lo[node]
        self.visited_nodes += 1
        self.pool.charge(1)
        cdef int64_t first_longer = lo + trie.n_ending[node]
        cdef int64_t hi = trie.token_hi[node]
        cdef int64_t position, k, i, range_end
        cdef int32_t first_child, last_child
        cdef bint use_blocks, accepted
        cdef node_t stack
        cdef int64_t run_end
        cdef partial_utf8 partial
        if walk.collect_pops and (self.sets.summaries[set_id].flags & SET_HAS_BASE):
            # A path popped out of the segment here: the tokens below this node are finished against
            # the real stack whenever the entry is used. Too many such nodes: the segment is too short.
            walk.pops.push_back(node)
            walk.pop_nodes += trie.node_end[node] - node
            if walk.pops.size() > walk.max_pops or \
                    <uint64_t>walk.pop_nodes > <uint64_t>walk.max_pops * CONTINUATION_NODES_PER_NODE:
                walk.aborted = True
                return 0
        # Tokens ending here: on a whole character they are accepted; inside one, as a stack takes the rest
        # of it. Those ending inside one sort by their partial state, so each run of equal states (the
        # root holds thousands of byte tokens) is decided once.
        position = lo
        while position < first_longer:
            partial = trie.end_partial[position]
            run_end = position + 1
            if partial.n_remain == 0:
                while run_end < first_longer and trie.end_partial[run_end].n_remain == 0:
                    run_end += 1
                accepted = True
            else:
                while run_end < first_longer and trie.end_partial[run_end].n_remain == partial.n_remain \
                        and trie.end_partial[run_end].value == partial.value:
                    run_end += 1
                accepted = self.sets.set_accepts_partial(set_id, partial)
            if accepted:
                set_position_range(bits, position, run_end)
                self.n_marked += run_end - position
            position = run_end
        if first_longer < hi:
            for k in range(self.sets.set_start[set_id], self.sets.set_start[set_id + 1]):
                stack = self.sets.set_nodes[k]
                if is_bottom(stack):
                    continue
                top = &elements[self.pool.nodes[stack].element]
                if top.type == LLAMA_GRETYPE_TOKEN:
                    position = trie.position_of[top.value] if top.value < <uint32_t>trie.n_vocab else -1
                    if first_longer <= position < hi:
                        set_position(bits, position)
                        self.n_marked += 1
                elif top.type == LLAMA_GRETYPE_TOKEN_NOT:
                    position = trie.position_of[top.value] if top.value < <uint32_t>trie.n_vocab else -1
                    if first_longer <= position < hi:
                        set_position_range(bits, first_longer, position)
                        set_position_range(bits, position + 1, hi)
                    else:
                        set_position_range(bits, first_longer, hi)
                    self.n_marked += hi - first_longer
        first_child = trie.child_start[node]
        last_child = trie.child_start[node + 1]
        if first_child == last_child:
            return 0
        if self.sets.summaries[set_id].viable_start == VIABLE_UNKNOWN:
            self.sets.compute_viable(set_id)
        if last_child - first_child >= 8 and not (self.sets.summaries[set_id].flags & SET_CLASS_KNOWN):
            self.sets.compute_loop(set_id)
        # The non-ASCII children sort last; when the set loops on every one of them, take them all at once.
        if (self.sets.summaries[set_id].flags & SET_CLASS_KNOWN) and (self.sets.summaries[set_id].flags & SET_CLASS_NON_ASCII) and \
                trie.first_non_ascii[node] < last_child and \
                self.sets.chain_accepts(set_id, trie.non_ascii_ascii[2 * node], trie.non_ascii_ascii[2 * node + 1],
                                   trie.non_ascii_flags[node], trie.non_ascii_depth[node]):
            set_position_range(bits, trie.token_lo[trie.children[trie.first_non_ascii[node]]], hi)
            self.n_marked += hi - trie.token_lo[trie.children[trie.first_non_ascii[node]]]
            last_child = trie.first_non_ascii[node]
        use_blocks = (self.sets.summaries[set_id].flags & SET_CLASS_KNOWN) and (
            self.sets.summaries[set_id].class_ascii[0] or self.sets.summaries[set_id].class_ascii[1] or (self.sets.summaries[set_id].flags & SET_CLASS_NON_ASCII))
        k = self.sets.summaries[set_id].viable_start
        while k < self.sets.summaries[set_id].viable_start + 2 * self.sets.summaries[set_id].viable_count:
            # the children whose code point lies in [viable_bounds[k], viable_bounds[k + 1]]
            i = lower_bound(trie.child_cp + first_child, trie.child_cp + last_child,
                            self.sets.viable_bounds[k]) - trie.child_cp
            range_end = upper_bound(trie.child_cp + i, trie.child_cp + last_child,
                                    self.sets.viable_bounds[k + 1]) - trie.child_cp
            while i < range_end:
                # A whole block of children whose code points, and everything below them,
                # lead back to the set is taken at once.
                if use_blocks and i % CHILD_BLOCK == 0 and i + CHILD_BLOCK <= range_end and self.sets.chain_accepts(
                        set_id, trie.block_ascii[2 * (i // CHILD_BLOCK)],
                        trie.block_ascii[2 * (i // CHILD_BLOCK) + 1], trie.block_flags[i // CHILD_BLOCK],
                        trie.block_depth[i // CHILD_BLOCK]):
                    set_position_range(bits, trie.token_lo[trie.children[i]],
                                       trie.token_hi[trie.children[i + CHILD_BLOCK - 1]])
                    self.n_marked += trie.token_hi[trie.children[i + CHILD_BLOCK - 1]] - trie.token_lo[trie.children[i]]
                    i += CHILD_BLOCK
                else:
                    self.visit_child(trie, trie.children[i], set_id, walk)
                    if walk.aborted:
                        return 0
                    i += 1
            k += 2
        return 0

    cdef int visit_child(self, const trie_view* trie, int32_t child, int32_t set_id, walk_state* walk) except -1 nogil:
        cdef uint64_t* bits = self.position_bits.data()
        cdef uint32_t cp = trie.node_cp[child]
        cdef int32_t next_set
        if (self.sets.summaries[set_id].flags & SET_CLASS_KNOWN) and self.sets.summaries[set_id].successor >= 0 and (
                (cp < 64 and (self.sets.summaries[set_id].class_ascii[0] >> cp) & 1)
                or (64 <= cp < 128 and (self.sets.summaries[set_id].class_ascii[1] >> (cp - 64)) & 1)
                or (cp >= 128 and (self.sets.summaries[set_id].flags & SET_CLASS_NON_ASCII))):
            next_set = self.sets.summaries[set_id].successor
        else:
            next_set = self.sets.transition(set_id, cp)
            if next_set < 0:
                return 0
        if not (trie.below_flags[child] & SUBTREE_OVERLONG_END) and (
                (self.sets.summaries[next_set].flags & SET_CLASS_KNOWN) or trie.node_end[child] - child >= LOOP_TEST_MIN_NODES):
            if self.sets.chain_accepts(next_set, trie.below_ascii[2 * child], trie.below_ascii[2 * child + 1],
                                  trie.below_flags[child], trie.below_depth[child]):
                set_position_range(bits, trie.token_lo[child], trie.token_hi[child])
                self.n_marked += trie.token_hi[child] - trie.token_lo[child]
                return 0
        self.trie_visit(trie, child, next_set, walk)
        return 0

    cdef int walk_mask(self, int32_t set_id, const trie_view* trie, uint32_t* out) except -1 nogil:
        """One trie walk from the whole set (the segment cache off)."""
        cdef walk_state walk = plain_walk()
        self.n_marked = 0
        self.trie_visit(trie, 0, set_id, &walk)
        self.positions_to_tokens(trie, out)
        return 0

    cdef int positions_to_tokens(self, const trie_view* trie, uint32_t* out) except -1 nogil:
        """Write the tokens marked in position_bits as token-id bits into out (width words), and clear
        position_bits. n_marked (an upper bound of the marks) picks the cheaper direction."""
        cdef int64_t width = (trie.n_vocab + 31) >> 5
        cdef position_drain drain = drain_words(self.position_bits.data(), 0, <int64_t>self.position_bits.size(),
                                                trie.n_positions)
        cdef int64_t position
        if 2 * self.n_marked <= trie.n_positions:
            memset(out, 0, width * sizeof(uint32_t))
            while True:
                position = next_set_position(&drain)
                if position < 0:
                    break
                set_token_bit(out, trie.token_at[position])
        else:
            # Mostly allowed: start from every trie token and clear the few rejected ones.
            memcpy(out, self.trie_token_words.data(), width * sizeof(uint32_t))
            while True:
                position = next_unset_position(&drain)
                if position < 0:
                    break
                clear_token_bit(out, trie.token_at[position])
        self.n_marked = 0
        return 0

    cdef void drain_subtree(self, const trie_view* trie, int32_t node, vector[token_t]* tokens,
                            uint32_t* out) noexcept nogil:
        """Append the tokens marked in position_bits below a trie node to *tokens (and set their bits in
        out unless NULL), clearing the marks. The walk from that node marked positions only inside its
        subtree, so position_bits is all zero again afterwards."""
        cdef position_drain drain
        cdef int64_t position
        cdef token_t token
        if trie.token_hi[node] > trie.token_lo[node]:
            drain = drain_words(self.position_bits.data(), trie.token_lo[node] >> 6,
                                ((trie.token_hi[node] - 1) >> 6) + 1, trie.n_positions)
            while True:
                position = next_set_position(&drain)
                if position < 0:
                    break
                token = trie.token_at[position]
                tokens.push_back(token)
                if out != NULL:
                    set_token_bit(out, token)
        self.n_marked = 0
