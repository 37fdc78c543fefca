# Included by _grammar.pyx (one extension, so the hot calls stay within one C translation unit).
# The segment cache: per top segment of a stack, the tokens accepted whatever lies below it and the trie
# nodes where a path pops out of it (continuations), finished against the real stack at run time. Owns
# entry ids.
# Declarations: _segments.pxd (included by _grammar.pxd).


cdef class SegmentScratch:
    """Scratch vectors of the segment cache, reused from call to call."""


cdef class SegmentCache:
    """The segment cache (entry ids): per top segment of a stack, its tokens and continuations."""

    def __cinit__(self, StackPool pool, StackSets sets, TrieWalk walk):
        cdef Rules rules = pool.rules
        self.pool = pool
        self.sets = sets
        self.walk = walk
        self.scratch = SegmentScratch()
        self.use_segments = True
        self.continuations_limit = DEFAULT_MAX_CONTINUATIONS
        self.segment_lengths.assign_zeros(rules.elements.size())
        self.element_transparent.assign_zeros(rules.elements.size())
        self.rule_nullable = _nullable_rules(rules)
        self.canonical_shift.assign_zeros(rules.elements.size())
        if walk.trie is not None:
            _repetition_chains_into(rules, self.rule_nullable, self.chain_depth, self.chain_next)
            _repetition_canonical_into(rules, self.chain_depth, self.chain_next, sets.max_token_depth + 2,
                                       self.canonical_shift)
        else:
            self.chain_depth.assign(rules.rule_start.size(), 0)
            self.chain_next.assign(rules.rule_start.size(), -1)

    cdef void reserve_headroom(self) noexcept nogil:
        self.segment_nodes.reserve(self.segment_nodes.size() * 3 // 2 + 1024)
        self.entry_of.reserve(self.entry_of.size() * 3 // 2 + 1024)
        self.context_sets.reserve(self.context_sets.size() * 3 // 2 + 1024)
        self.dense_offsets.reserve(self.dense_offsets.size() * 3 // 2 + 64)
        self.continuation_results.reserve(self.continuation_results.size() * 3 // 2 + 1024)
        self.continuation_entry_of.reserve(self.continuation_entry_of.size() * 3 // 2 + 1024)
        self.entry_results.reserve(self.entry_results.size() * 3 // 2 + 1024)

    @property
    def segment_bytes(self):
        """Memory held by the segment entries (accepted tokens and continuations), in bytes."""
        return self.segment_cache_bytes() + self.entry_of.size() * 24

    @property
    def segment_stats(self):
        """Counters of the segment cache: entries built and held, lookups served, walks grown, continuations walked."""
        cdef size_t dense = 0, continuations = 0
        cdef size_t i
        for i in range(self.entries.size()):
            dense += self.entries[i].n_tokens < 0
            continuations += self.entries[i].n_continuations
        return {"entries": self.entries.size(), "dense_entries": dense, "continuations": continuations,
                "built": self.counters.built, "continuation_entries": self.counters.continuation_entries,
                "hits": self.counters.hits,
                "grown": self.counters.grown, "continuation_walks": self.counters.continuation_walks,
                "union_walks": self.counters.union_walks,
                "bytes": self.segment_bytes}

    cdef size_t segment_cache_bytes(self) noexcept nogil:
        return ((self.entry_words.size() + self.entry_tokens.size() + self.entry_continuations.size()
                 + self.continuation_tokens.size()) * 4 + self.entries.size() * sizeof(segment_entry)
                + (self.continuation_results.size() + self.continuation_entry_of.size()
                   + self.entry_results.size()) * 40)

    cdef bint segment_cache_full(self) noexcept nogil:
        return self.segment_cache_bytes() > MAX_SEGMENT_CACHE_BYTES

    def _segment_entries(self):
        """Test shim: per segment entry, (segment length, accepted tokens or -1 when dense, continuations)."""
        return [(self.entries[i].length, self.entries[i].n_tokens, self.entries[i].n_continuations)
                for i in range(self.entries.size())]

    cdef int segment_of(self, node_t stack, int32_t length, node_t* segment, node_t* below) except -1 nogil:
        """The top `length` frames of a stack (all of them if it has fewer, or if length is WHOLE_STACK)
        re-pushed on SEGMENT_BASE (*segment), and the stack below them (*below; EMPTY_STACK when the
        segment holds the whole stack)."""
        # lengths of segments tried frame by frame are at most MAX_SEGMENT_LENGTH (< 63): code 63 is WHOLE_STACK
        cdef uint64_t key = (<uint64_t><uint32_t>stack << 6) | <uint32_t>(63 if length >= 63 else length)
        cdef int32_t n = 0
        cdef node_t node = stack
        it = self.segment_nodes.find(key)
        if it != self.segment_nodes.end():
            segment[0] = deref(it).second.first
            below[0] = deref(it).second.second
            return 0
        if length != WHOLE_STACK and length >= 63:
            with gil:
                raise GrammarError(f"internal error: a segment of {length} frames (segments are at most "
                                   f"{MAX_SEGMENT_LENGTH} frames or the whole stack)")
        self.scratch.frames.clear()
        self.pool.work += length if length != WHOLE_STACK else 0   # (counted, not checked: a step of a mask)
        while (length == WHOLE_STACK or n < length) and node != EMPTY_STACK:
            self.pool.work += 1 if length == WHOLE_STACK else 0
            if n >= MAX_WHOLE_SEGMENT_FRAMES:
                # (the caller answers this mask on the reference path)
                with gil:
                    raise GrammarError(f"fast path: a stack deeper than {MAX_WHOLE_SEGMENT_FRAMES} frames "
                                       "(MAX_WHOLE_SEGMENT_FRAMES) as one segment")
            self.scratch.frames.push_back(self.canonical_of(self.pool.nodes[node].element))
            node = self.pool.nodes[node].parent
            n += 1
        below[0] = node
        node = SEGMENT_BASE
        while n > 0:
            n -= 1
            node = self.pool.push(node, self.scratch.frames[n])
        segment[0] = node
        self.segment_nodes[key] = pair[node_t, node_t](segment[0], below[0])
        return 0

    cdef int32_t build_entry(self, node_t segment, int32_t length, const trie_view* trie, size_t max_pops) \
            except -2 nogil:
        """Walk the trie from a segment stack and store what it accepts whatever lies below, and where
        its paths pop out (the continuations). NO_ENTRY when it pops out at more than max_pops nodes (or
        above too many nodes in all) to be worth it."""
        cdef walk_state walk = segment_walk(&self.scratch.pops, max_pops)
        cdef vector[node_t] start
        cdef int32_t set_id, entry_id
        cdef int64_t width = (trie.n_vocab + 31) >> 5
        cdef int64_t offset
        cdef segment_entry entry
        cdef uint64_t hash_value
        cdef bint completed
        start.push_back(segment)
        set_id = self.sets.intern_set(start)
        self.walk.n_marked = 0
        completed = False
        try:
            self.walk.trie_visit(trie, 0, set_id, &walk)
            completed = True
        finally:
            if not completed:
                self.walk.clear_marks()
        if walk.aborted:
            self.walk.clear_marks()
            self.counters.grown += 1
            return NO_ENTRY
        entry.length = length
        entry.continuations_start = <int64_t>self.entry_continuations.size()
        entry.n_continuations = <int32_t>self.scratch.pops.size()
        self.entry_continuations.insert(self.entry_continuations.end(), self.scratch.pops.begin(),
                                        self.scratch.pops.end())
        if self.walk.n_marked < width:
            # few tokens: kept as ids (fewer bytes than the dense words)
            entry.tokens_start = <int64_t>self.entry_tokens.size()
            self.walk.drain_subtree(trie, 0, &self.entry_tokens, NULL)
            entry.n_tokens = <int32_t>(<int64_t>self.entry_tokens.size() - entry.tokens_start)
            self.walk.n_marked = 0
        else:
            offset = <int64_t>self.entry_words.size()
            self.entry_words.resize(offset + width)
            self.walk.positions_to_tokens(trie, self.entry_words.data() + offset)
            # Entries of long bounded repetitions often accept the very same tokens: keep one copy.
            hash_value = words_hash(self.entry_words.data() + offset, width)
            found = self.dense_offsets.find(hash_value)
            if found != self.dense_offsets.end() and memcmp(
                    self.entry_words.data() + deref(found).second, self.entry_words.data() + offset,
                    width * sizeof(uint32_t)) == 0:
                self.entry_words.resize(offset)
                offset = deref(found).second
            else:
                self.dense_offsets[hash_value] = offset
            entry.tokens_start = offset
            entry.n_tokens = -1
        entry_id = <int32_t>self.entries.size()
        self.entries.push_back(entry)
        self.entry_of[segment] = entry_id
        self.counters.built += 1
        return entry_id

    cdef inline position_t canonical_of(self, position_t pos) noexcept nogil:
        """The position segment keys use for pos (_repetition_canonical_into): itself unless it lies far out
        in a long bounded repetition."""
        return <position_t>(<int64_t>pos + self.canonical_shift[pos])

    cdef int32_t find_entry(self, node_t stack, const trie_view* trie, node_t* below) except -2 nogil:
        """The segment entry serving a stack, built if no length tried for its top position has one;
        *below is the stack under the segment (-1 when the segment is the whole stack)."""
        cdef position_t top = self.canonical_of(self.pool.nodes[stack].element)
        cdef uint32_t lengths = self.segment_lengths[top]
        cdef uint32_t remaining = lengths
        cdef int32_t length, entry_id
        cdef node_t segment
        while remaining:
            length = ctz64(remaining) + 1
            remaining &= remaining - 1
            self.segment_of(stack, length, &segment, below)
            it = self.entry_of.find(segment)
            if it != self.entry_of.end():
                self.counters.hits += 1
                return deref(it).second
        length = ctz64(lengths) + 1 if lengths else 1
        length = self.skip_transparent(stack, length)
        while True:
            self.segment_of(stack, length, &segment, below)
            it = self.entry_of.find(segment)
            if it != self.entry_of.end():
                self.counters.hits += 1
                return deref(it).second
            # (the whole stack: a longer segment would be the same, so it pops out as often as it takes)
            entry_id = self.build_entry(segment, length, trie,
                                        POPS_UNBOUNDED if below[0] == EMPTY_STACK else self.continuations_limit)
            if entry_id != NO_ENTRY:
                if length <= 32:
                    self.segment_lengths[top] |= (<uint32_t>1) << (length - 1)
                return entry_id
            if length == WHOLE_STACK:
                with gil:
                    raise GrammarError("internal error: the whole stack as one segment popped out too often")
            length = self.skip_transparent(stack, length + 1) if length < MAX_SEGMENT_LENGTH else WHOLE_STACK

    cdef bint transparent(self, position_t pos) noexcept nogil:
        """Whether the rest of a frame's alternative can match the empty string: a path that pops
        the frame above it pops this one too, so a segment should never end on it."""
        cdef const grammar_element* elements = self.pool.rules.elements.data()
        cdef position_t p = pos
        if self.element_transparent[pos] == 0:
            self.element_transparent[pos] = 2
            while not is_end_of_sequence(&elements[p]):
                if elements[p].type != LLAMA_GRETYPE_RULE_REF or not self.rule_nullable[elements[p].value]:
                    self.element_transparent[pos] = 1
                    break
                p += 1
        return self.element_transparent[pos] == 2

    cdef int32_t skip_transparent(self, node_t stack, int32_t length) noexcept nogil:
        """Lengthen a segment of `length` frames while its lowest frame is transparent."""
        cdef node_t node = stack
        cdef int32_t n = 1
        while node != EMPTY_STACK and n < length:
            node = self.pool.nodes[node].parent
            n += 1
        # node is the segment's lowest frame (or the stack ran out)
        while node != EMPTY_STACK and n < MAX_SEGMENT_LENGTH and n > 1 and self.transparent(self.pool.nodes[node].element):
            node = self.pool.nodes[node].parent
            n += 1
        return n

    cdef int32_t context_set(self, node_t below) except -2 nogil:
        """The set the stack under a segment advances to: where popped paths go on."""
        cdef vector[node_t] stacks
        cdef int32_t set_id
        it = self.context_sets.find(below)
        if it != self.context_sets.end():
            return deref(it).second
        self.pool.advance_stack(below, stacks)
        set_id = self.sets.intern_set(stacks)
        self.context_sets[below] = set_id
        return set_id

    cdef void clear_segments(self) noexcept nogil:
        self.entry_results.clear()
        self.continuation_entry_of.clear()
        self.continuation_results.clear()
        self.continuation_tokens.clear()
        self.dense_offsets.clear()
        self.entry_of.clear()
        self.entries.clear()
        self.entry_words.clear()
        self.entry_tokens.clear()
        self.entry_continuations.clear()

    cdef int32_t build_continuation_entry(self, node_t frame, int32_t node, const trie_view* trie) except -2 nogil:
        """The entry of a continuation node as seen from the frame under a segment (frame: that one
        element re-pushed on SEGMENT_BASE): the tokens below the node that the frame's stack accepts
        from there on whatever lies under it, and the nodes further down where its paths pop out too.
        -1 (remembered) when it pops out too often or accepts more tokens than are kept."""
        cdef uint64_t key = (<uint64_t><uint32_t>frame << 32) | <uint32_t>node
        cdef int32_t context, entry_id
        cdef int64_t offset
        cdef segment_entry entry
        cdef bint completed = False
        it = self.continuation_entry_of.find(key)
        if it != self.continuation_entry_of.end():
            return deref(it).second
        cdef walk_state walk = segment_walk(&self.scratch.pops, self.continuations_limit)
        context = self.context_set(frame)
        try:
            self.walk.trie_visit(trie, node, context, &walk)
            completed = True
        finally:
            if not completed:
                self.walk.clear_marks()
        offset = <int64_t>self.entry_tokens.size()
        self.walk.drain_subtree(trie, node, &self.entry_tokens, NULL)
        if walk.aborted or <int64_t>self.entry_tokens.size() - offset > MAX_MEMOIZED_CONTINUATION:
            self.entry_tokens.resize(offset)
            self.continuation_entry_of[key] = NO_ENTRY
            return NO_ENTRY
        entry.length = 1
        entry.tokens_start = offset
        entry.n_tokens = <int32_t>(<int64_t>self.entry_tokens.size() - offset)
        entry.continuations_start = <int64_t>self.entry_continuations.size()
        entry.n_continuations = <int32_t>self.scratch.pops.size()
        self.entry_continuations.insert(self.entry_continuations.end(), self.scratch.pops.begin(),
                                        self.scratch.pops.end())
        entry_id = <int32_t>self.entries.size()
        self.entries.push_back(entry)
        self.continuation_entry_of[key] = entry_id
        self.counters.continuation_entries += 1
        return entry_id

    cdef int continuation_into(self, const trie_view* trie, int32_t node, node_t below, uint32_t* out,
                               vector[token_t]* collect, int32_t depth) except -1 nogil:
        """OR into out the tokens below a continuation node that the stack below the segment accepts from
        there on. From the entry of that stack's top frame at the node when it has one (built on first
        use, and shared by every stack with that top frame), its own continuations taken one frame further
        down; otherwise from a walk of the node's subtree with the whole set the stack advances to,
        memoized per (stack, node)."""
        cdef uint64_t key = (<uint64_t><uint32_t>below << 32) | <uint32_t>node
        cdef int64_t offset, j, start, count, c
        cdef token_t token
        cdef node_t frame, under
        cdef int32_t sub, context
        cdef size_t collect_start = collect.size()
        cdef walk_state walk = plain_walk()
        self.pool.charge(1)
        it = self.continuation_results.find(key)
        if it != self.continuation_results.end():
            for j in range(deref(it).second.first, deref(it).second.first + deref(it).second.second):
                token = self.continuation_tokens[j]
                set_token_bit(out, token)
                collect.push_back(token)
            return 0
        if below != EMPTY_STACK:
            if depth >= MAX_CONTINUATION_DEPTH:
                # (each level is a C frame: a stack of nullable frames must not recurse without bound)
                with gil:
                    raise GrammarError(f"fast path: continuations followed more than {MAX_CONTINUATION_DEPTH} "
                                       "frames down (MAX_CONTINUATION_DEPTH)")
            self.segment_of(below, 1, &frame, &under)
            sub = self.build_continuation_entry(frame, node, trie)
            if sub >= 0:
                start = self.entries[sub].tokens_start
                count = self.entries[sub].n_tokens
                for j in range(start, start + count):
                    token = self.entry_tokens[j]
                    set_token_bit(out, token)
                    collect.push_back(token)
                start = self.entries[sub].continuations_start
                count = self.entries[sub].n_continuations
                for c in range(start, start + count):
                    # (entries and their lists may grow inside: read them by index, never by pointer)
                    self.continuation_into(trie, self.entry_continuations[c], under, out, collect, depth + 1)
                # Kept like a walk's answer: the same (stack below, node) is met again along other paths
                # down a stack of frames that each pop at once (a run of nullable frames), which would
                # otherwise be walked once per path.
                count = <int64_t>(collect.size() - collect_start)
                if count <= MAX_MEMOIZED_CONTINUATION:
                    offset = <int64_t>self.continuation_tokens.size()
                    self.continuation_tokens.insert(self.continuation_tokens.end(), collect.begin() + collect_start,
                                                    collect.end())
                    self.continuation_results[key] = pair[int64_t, int32_t](offset, <int32_t>count)
                return 0
        self.counters.continuation_walks += 1
        context = self.context_set(below)
        self.walk.trie_visit(trie, node, context, &walk)
        offset = <int64_t>self.continuation_tokens.size()
        self.walk.drain_subtree(trie, node, &self.continuation_tokens, out)
        collect.insert(collect.end(), self.continuation_tokens.begin() + offset, self.continuation_tokens.end())
        if <int64_t>self.continuation_tokens.size() - offset > MAX_MEMOIZED_CONTINUATION:
            self.continuation_tokens.resize(offset)
        else:
            self.continuation_results[key] = pair[int64_t, int32_t](
                offset, <int32_t>(<int64_t>self.continuation_tokens.size() - offset))
        return 0

    cdef int segment_mask(self, int32_t set_id, const trie_view* trie, uint32_t* out) except -1 nogil:
        """The union over the set's stacks of their segment entries: the tokens each accepts whatever
        lies below, and its continuations walked from the set its real stack below advances to."""
        cdef int64_t width = (trie.n_vocab + 31) >> 5
        cdef int64_t k, w, j, c, word, position, last_word
        cdef int32_t entry_id, context
        cdef node_t stack, below
        cdef segment_entry entry
        cdef const uint32_t* words
        cdef const token_t* tokens
        cdef uint64_t key
        cdef uint64_t* bits_at
        cdef uint64_t bits
        cdef token_t token
        cdef int32_t node
        cdef bint seen
        if self.segment_cache_full():
            self.clear_segments()
        self.scratch.resolved.clear()
        self.scratch.resolved_below.clear()
        memset(out, 0, width * sizeof(uint32_t))
        for k in range(self.sets.set_start[set_id], self.sets.set_start[set_id + 1]):
            stack = self.sets.set_nodes[k]
            if stack == EMPTY_STACK:
                # The empty stack takes only a token whose text is already over at the root (an overlong
                # C0 80 decodes to the terminator) and ends on a whole character.
                for position in range(trie.nodes[0].token_lo, trie.nodes[0].token_lo + trie.nodes[0].n_whole):
                    token = trie.token_at[position]
                    set_token_bit(out, token)
                continue
            entry_id = self.find_entry(stack, trie, &below)
            self.scratch.resolved.push_back(entry_id)
            self.scratch.resolved_below.push_back(below)
        self.scratch.resolved_done.assign(self.scratch.resolved.size(), 0)
        # What composing this mask again would cost, in token writes (a dense entry's words count a
        # quarter each): the mask cache keeps only masks dearer to compose than to copy back.
        self.compose_cost = 64 * <int64_t>self.scratch.resolved.size()
        for k in range(<int64_t>self.scratch.resolved.size()):
            entry = self.entries[self.scratch.resolved[k]]   # a copy: the continuations below may add entries
            self.compose_cost += entry.n_tokens if entry.n_tokens >= 0 else width // 4
            if entry.n_tokens >= 0:
                tokens = self.entry_tokens.data() + entry.tokens_start
                for j in range(entry.n_tokens):
                    token = tokens[j]
                    set_token_bit(out, token)
            else:
                words = self.entry_words.data() + entry.tokens_start
                for w in range(width):
                    out[w] |= words[w]
            if entry.n_continuations == 0:
                continue
            seen = False
            for j in range(k):
                if self.scratch.resolved[j] == self.scratch.resolved[k] and self.scratch.resolved_below[j] == self.scratch.resolved_below[k]:
                    seen = True
                    break
            if seen:
                continue
            if self.scratch.resolved_done[k]:
                continue
            # The answer of all of an entry's continuations under one stack below is kept whole.
            key = (<uint64_t><uint32_t>self.scratch.resolved[k] << 32) | <uint32_t>self.scratch.resolved_below[k]
            found = self.entry_results.find(key)
            if found != self.entry_results.end():
                self.compose_cost += deref(found).second.second
                for j in range(deref(found).second.first, deref(found).second.first + deref(found).second.second):
                    token = self.continuation_tokens[j]
                    set_token_bit(out, token)
                continue
            if self.union_continuations(k, trie, out):
                continue
            self.scratch.collected.clear()
            for c in range(entry.n_continuations):
                self.continuation_into(trie, self.entry_continuations[entry.continuations_start + c],
                                       self.scratch.resolved_below[k], out, &self.scratch.collected, 0)
            self.compose_cost += <int64_t>self.scratch.collected.size()
            if <int64_t>self.scratch.collected.size() <= MAX_MEMOIZED_CONTINUATION:
                self.entry_results[key] = pair[int64_t, int32_t](<int64_t>self.continuation_tokens.size(),
                                                                 <int32_t>self.scratch.collected.size())
                self.continuation_tokens.insert(self.continuation_tokens.end(), self.scratch.collected.begin(),
                                                self.scratch.collected.end())
        self.walk.n_marked = 0
        return 0

    cdef bint union_continuations(self, int64_t k, const trie_view* trie, uint32_t* out) except -1 nogil:
        """Answer at once the continuations of resolved[k]'s entry under every stack below that the set
        being masked puts under it with no answer kept (entry_results), when there are UNION_MIN_BELOW or
        more: one plain walk per continuation node with the union of the sets those stacks advance to, in
        place of a chain of continuation entries per stack below. The mask wants the union, and a walk with
        a union of stacks accepts exactly what some stack of it accepts (llama.cpp rejects a token only when
        every stack does), so it is the same as the per-stack answers ORed. It is the case after `,` in an
        object of many optional properties: the `space` entry serves every property that may come next,
        each its own stack below (Github_ultra---o57878: 81 of them, 30 nodes where paths leave `space`:
        2,430 continuation entries). Not kept: False (fewer stacks) leaves them to the caller."""
        cdef int64_t j, c, n = 0, first, last
        cdef int32_t entry_id = self.scratch.resolved[k], context
        cdef node_t below
        cdef segment_entry entry = self.entries[entry_id]
        cdef uint64_t key
        cdef walk_state walk
        for j in range(k, <int64_t>self.scratch.resolved.size()):
            if self.scratch.resolved[j] == entry_id and not self.scratch.resolved_done[j]:
                key = (<uint64_t><uint32_t>entry_id << 32) | <uint32_t>self.scratch.resolved_below[j]
                if self.entry_results.find(key) == self.entry_results.end():
                    n += 1
        if n < UNION_MIN_BELOW:
            return False
        self.scratch.union_stacks.clear()
        for j in range(k, <int64_t>self.scratch.resolved.size()):
            if self.scratch.resolved[j] != entry_id or self.scratch.resolved_done[j]:
                continue
            below = self.scratch.resolved_below[j]
            key = (<uint64_t><uint32_t>entry_id << 32) | <uint32_t>below
            if self.entry_results.find(key) != self.entry_results.end():
                continue   # (answered from what is kept when its turn comes)
            self.scratch.resolved_done[j] = 1
            context = self.context_set(below)
            first = self.sets.set_start[context]
            last = self.sets.set_start[context + 1]
            self.scratch.union_stacks.insert(self.scratch.union_stacks.end(), self.sets.set_nodes.begin() + first,
                                             self.sets.set_nodes.begin() + last)
        context = self.sets.intern_set(self.scratch.union_stacks)
        self.counters.union_walks += 1
        self.scratch.collected.clear()
        for c in range(entry.n_continuations):
            walk = plain_walk()
            self.walk.trie_visit(trie, self.entry_continuations[entry.continuations_start + c], context, &walk)
            self.walk.drain_subtree(trie, self.entry_continuations[entry.continuations_start + c],
                                    &self.scratch.collected, out)
        self.compose_cost += <int64_t>self.scratch.collected.size()
        return True

    cdef int32_t build_frames(self, list frames, bint whole, const trie_view* trie) except -3:
        """Build the entry of a segment given as element positions, top first (whole: nothing lies under
        it), or find it built: its id, NO_ENTRY when it pops out too often, CACHE_FULL when the cache is full."""
        cdef node_t node = SEGMENT_BASE
        cdef int32_t entry_id, length = len(frames)
        cdef position_t top = self.canonical_of(<position_t>frames[0])
        cdef Py_ssize_t i
        if self.segment_cache_full():
            return CACHE_FULL
        self.walk.ensure_position_bits()
        for i in range(length - 1, -1, -1):
            node = self.pool.push(node, self.canonical_of(<position_t>frames[i]))
        it = self.entry_of.find(node)
        if it != self.entry_of.end():
            return deref(it).second
        with nogil:
            entry_id = self.build_entry(node, length, trie, POPS_UNBOUNDED if whole else self.continuations_limit)
        if entry_id < 0:
            return NO_ENTRY
        if length <= 32:
            self.segment_lengths[top] |= (<uint32_t>1) << (length - 1)
        return entry_id
