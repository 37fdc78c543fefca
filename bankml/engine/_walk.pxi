# Included by _grammar.pyx (one extension, so the hot calls stay within one C translation unit).
# The walk of the vocabulary trie with a stack set: marks the accepted tokens' trie positions in
# position_bits, taking whole subtrees and blocks where the set's class allows, and subtrees along a run of
# sets with one class (take_run: length-limited strings) visiting only where paths leave it; a walk's mode
# is the walk_state it is given. Owns trie positions (position_bits).
# Declarations: _walk.pxd (included by _grammar.pxd).


# take_run: subtrees smaller than TAKE_RUN_MIN_NODES are walked node by node, and so are those with fewer than
# TAKE_RUN_NODES_PER_LOOKUP nodes per look-up of exceptions (a code point outside the class at one depth);
# the set after the run is finished in words when it takes at most TAKE_RUN_MAX_CODE_POINTS code points.
cdef enum:
    TAKE_RUN_MIN_NODES = 64
    TAKE_RUN_MIN_NODE_BY_NODE = 3   # a run shorter than this is not taken when its end goes node by node
    TAKE_RUN_NODES_PER_LOOKUP = 16
    TAKE_RUN_MAX_CODE_POINTS = 8

# take_run keeps the exceptions below subtrees of RUN_LIST_MIN_NODES nodes or more (run_exception_list), at most
# MAX_RUN_LISTS lists and MAX_RUN_LIST_ITEMS exceptions in all (32 bytes each) per context.
cdef enum:
    RUN_LIST_MIN_NODES = 4096
    MAX_RUN_LISTS = 64
    MAX_RUN_LIST_ITEMS = 1 << 17

# visit_recorded: subtrees of SUBTREE_RECORD_MIN_NODES nodes or more, at most SUBTREE_RECORD_MAX_WORDS position words
# each; per context at most SUBTREE_RECORDS records, SUBTREE_RECORD_TOTAL_WORDS words and SUBTREE_RECORD_TOTAL_POPS
# pops in all (about 17 MB).
cdef enum:
    SUBTREE_RECORD_MIN_NODES = 4096
    SUBTREE_RECORD_MAX_WORDS = 4096
    SUBTREE_RECORD_TOTAL_WORDS = 1 << 20
    SUBTREE_RECORD_TOTAL_POPS = 1 << 18
    SUBTREE_RECORDS = 1 << 16


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
        """position_bits sized to the trie (all zero between walks), take_run's scratch stacks empty."""
        self.run_items.clear()
        self.run_sets.clear()
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
        cdef int64_t lo = trie.nodes[node].token_lo
        self.visited_nodes += 1
        self.pool.charge(1)
        cdef int64_t first_longer = lo + trie.nodes[node].n_ending
        cdef int64_t hi = trie.nodes[node].token_hi
        cdef int64_t position, k, i, range_end, viable_first, viable_end
        cdef int32_t first_child, last_child
        cdef bint use_blocks, accepted, family
        cdef node_t stack
        cdef int64_t run_end
        cdef partial_utf8 partial
        if walk.collect_pops and (self.sets.summaries[set_id].flags & SET_HAS_BASE):
            # A path popped out of the segment here: the tokens below this node are finished against
            # the real stack whenever the entry is used. Too many such nodes: the segment is too short.
            walk.pops.push_back(node)
            walk.pop_nodes += trie.nodes[node].node_end - node
            if walk.pops.size() > walk.max_pops or \
                    <uint64_t>walk.pop_nodes > <uint64_t>walk.max_pops * CONTINUATION_NODES_PER_NODE:
                walk.aborted = True
                return 0
        # Tokens ending here: on a whole character they are accepted; inside one, as a stack takes the rest
        # of it. Those ending inside one sort after the others, by their partial state, so each run of equal
        # states (the root holds thousands of byte tokens) is decided once, and none is looked at when the
        # set takes no unfinished character (a segment walk starts at the root, under hundreds of them).
        position = lo + trie.nodes[node].n_whole
        if position > lo:
            set_position_range(bits, lo, position)
            self.n_marked += position - lo
        if position < first_longer and self.sets.partial_mode_of(set_id) == PARTIAL_NONE:
            position = first_longer
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
        first_child = trie.nodes[node].child_start
        last_child = trie.nodes[node].child_end
        if first_child == last_child:
            return 0
        # Below a node on a bounded run (a length-limited string), only where paths leave the run is walked.
        if self.take_run(trie, node, set_id, walk):
            return 0
        if self.sets.summaries[set_id].viable_start == VIABLE_UNKNOWN:
            self.sets.compute_viable(set_id)
        if last_child - first_child >= 8 and not (self.sets.summaries[set_id].flags & SET_CLASS_KNOWN):
            self.sets.compute_loop(set_id)
        # A family (compute_family: sets closed under one class, each taking all of it) takes whole every child
        # whose subtree holds only the class's code points.
        # Asked only where the walk has no other way to take non-ASCII subtrees whole: a set whose classes take the
        # code points >= 0x80 alike has its loop and runs for that (llama.cpp mode's strings); exploring families
        # there too cost the 500 MaskBench schemas' cold masks in llama.cpp mode 6 % in mean and 9 % in p99 (four
        # alternating runs). Strict mode's string classes leave the surrogates out, so they never take them all
        # alike. (A set that loops on its own class is asked all the same: a search's state of no progress is the
        # set most nodes meet, and its family holds the others.)
        if not (self.sets.summaries[set_id].total_flags & TOTAL_KNOWN) and last_child - first_child >= 8:
            if self.sets.constant_above(set_id):
                self.sets.summaries[set_id].total_flags = TOTAL_KNOWN
            else:
                self.sets.compute_family(set_id)
        family = (self.sets.summaries[set_id].total_flags & TOTAL_KNOWN) and (
            self.sets.summaries[set_id].total_ascii[0] or self.sets.summaries[set_id].total_ascii[1]
            or (self.sets.summaries[set_id].total_flags & TOTAL_TEXT))
        # The non-ASCII children sort last; when the set's chain takes every one of them (all code points >= 0x80, or
        # those of the interval of its class above ASCII that holds the children's span), take them all at once.
        if trie.nodes[node].first_non_ascii < last_child and (
                ((self.sets.summaries[set_id].flags & SET_CLASS_KNOWN)
                 and (self.sets.summaries[set_id].flags & (SET_CLASS_NON_ASCII | SET_CLASS_ABOVE)) and
                 self.sets.chain_accepts(set_id, trie.non_ascii_ascii[2 * node], trie.non_ascii_ascii[2 * node + 1],
                                         trie.non_ascii_flags[node], trie.non_ascii_depth[node],
                                         &trie.non_ascii_span[2 * node]))
                or (family and self.sets.family_accepts(set_id, trie.non_ascii_ascii[2 * node],
                                                        trie.non_ascii_ascii[2 * node + 1], trie.non_ascii_flags[node]))):
            set_position_range(bits, trie.nodes[trie.children[trie.nodes[node].first_non_ascii]].token_lo, hi)
            self.n_marked += hi - trie.nodes[trie.children[trie.nodes[node].first_non_ascii]].token_lo
            last_child = trie.nodes[node].first_non_ascii
        use_blocks = (self.sets.summaries[set_id].flags & SET_CLASS_KNOWN) and (
            self.sets.summaries[set_id].class_ascii[0] or self.sets.summaries[set_id].class_ascii[1]
            or (self.sets.summaries[set_id].flags & (SET_CLASS_NON_ASCII | SET_CLASS_ABOVE)))
        # The viable intervals and the children are both sorted: walk them together. An interval below the next
        # child is skipped by a binary search over the intervals, so a set with hundreds of them (a Unicode
        # class such as Python's \w) costs per node what its children need, not what its intervals number.
        viable_first = self.sets.summaries[set_id].viable_start
        viable_end = viable_first + 2 * self.sets.summaries[set_id].viable_count
        k = viable_first
        i = first_child
        while k < viable_end and i < last_child:
            if self.sets.viable_bounds[k + 1] < trie.child_cp[i]:
                k = viable_first + 2 * first_interval_reaching(self.sets.viable_bounds.data() + viable_first,
                                                               (k - viable_first) >> 1,
                                                               (viable_end - viable_first) >> 1, trie.child_cp[i])
                continue
            # the children whose code point lies in [viable_bounds[k], viable_bounds[k + 1]] (those before i lie
            # below it: they were below the intervals already passed)
            i = lower_bound(trie.child_cp + i, trie.child_cp + last_child,
                            self.sets.viable_bounds[k]) - trie.child_cp
            range_end = upper_bound(trie.child_cp + i, trie.child_cp + last_child,
                                    self.sets.viable_bounds[k + 1]) - trie.child_cp
            while i < range_end:
                # A whole block of children whose code points, and everything below them,
                # lead back to the set (or stay in its family's class) is taken at once.
                if i % CHILD_BLOCK == 0 and i + CHILD_BLOCK <= range_end and (
                        (family and self.sets.family_accepts(
                            set_id, trie.block_ascii[2 * (i // CHILD_BLOCK)], trie.block_ascii[2 * (i // CHILD_BLOCK) + 1],
                            trie.block_flags[i // CHILD_BLOCK]))
                        or (use_blocks and self.sets.chain_accepts(
                            set_id, trie.block_ascii[2 * (i // CHILD_BLOCK)],
                            trie.block_ascii[2 * (i // CHILD_BLOCK) + 1], trie.block_flags[i // CHILD_BLOCK],
                            trie.block_depth[i // CHILD_BLOCK], &trie.block_span[2 * (i // CHILD_BLOCK)]))):
                    set_position_range(bits, trie.nodes[trie.children[i]].token_lo,
                                       trie.nodes[trie.children[i + CHILD_BLOCK - 1]].token_hi)
                    self.n_marked += trie.nodes[trie.children[i + CHILD_BLOCK - 1]].token_hi - trie.nodes[trie.children[i]].token_lo
                    i += CHILD_BLOCK
                elif family and self.family_takes_child(trie, trie.children[i], set_id):
                    set_position_range(bits, trie.nodes[trie.children[i]].token_lo, trie.nodes[trie.children[i]].token_hi)
                    self.n_marked += trie.nodes[trie.children[i]].token_hi - trie.nodes[trie.children[i]].token_lo
                    i += 1
                else:
                    # (the next children's records asked for now: a cold mask meets the trie out of cache,
                    # a miss per child visited)
                    if i + 1 < range_end:
                        prefetch(&trie.nodes[trie.children[i + 1]])
                        if i + 2 < range_end:
                            prefetch(&trie.nodes[trie.children[i + 2]])
                    self.visit_child(trie, trie.children[i], set_id, walk)
                    if walk.aborted:
                        return 0
                    i += 1
            k += 2
        return 0

    cdef bint family_takes_child(self, const trie_view* trie, int32_t child, int32_t set_id) noexcept nogil:
        """Whether the set's family takes every token at or below child (its edge's code point included)."""
        cdef uint32_t cp = trie.nodes[child].node_cp
        cdef uint64_t lo = trie.nodes[child].below_ascii[0], hi = trie.nodes[child].below_ascii[1]
        cdef uint8_t flags = trie.nodes[child].below_flags
        if cp < 64:
            lo |= (<uint64_t>1) << cp
        elif cp < 128:
            hi |= (<uint64_t>1) << (cp - 64)
        else:
            flags |= SUBTREE_NON_ASCII
            if is_odd_code_point(cp):
                flags |= SUBTREE_ODD
        return self.sets.family_accepts(set_id, lo, hi, flags)

    cdef int visit_child(self, const trie_view* trie, int32_t child, int32_t set_id, walk_state* walk) except -1 nogil:
        cdef uint64_t* bits = self.position_bits.data()
        cdef uint32_t cp = trie.nodes[child].node_cp
        cdef int32_t next_set
        cdef const grammar_element* after
        if (self.sets.summaries[set_id].flags & SET_CLASS_KNOWN) and self.sets.summaries[set_id].successor >= 0 and (
                (cp < 64 and (self.sets.summaries[set_id].class_ascii[0] >> cp) & 1)
                or (64 <= cp < 128 and (self.sets.summaries[set_id].class_ascii[1] >> (cp - 64)) & 1)
                or (cp >= 128 and (self.sets.summaries[set_id].flags & SET_CLASS_NON_ASCII))):
            next_set = self.sets.summaries[set_id].successor
        elif cp >= 128 and (self.sets.summaries[set_id].flags & SET_CLASS_ABOVE):
            # only class_above takes code points >= 0x80, and those it takes lead to the successor
            if not self.sets.class_takes(self.sets.summaries[set_id].class_above, cp, &after):
                return 0
            next_set = self.sets.summaries[set_id].successor
        else:
            next_set = self.sets.transition(set_id, cp)
            if next_set < 0:
                return 0
        if not (trie.nodes[child].below_flags & SUBTREE_OVERLONG_END) and (
                (self.sets.summaries[next_set].flags & SET_CLASS_KNOWN) or trie.nodes[child].node_end - child >= LOOP_TEST_MIN_NODES):
            if self.sets.chain_accepts(next_set, trie.nodes[child].below_ascii[0], trie.nodes[child].below_ascii[1],
                                  trie.nodes[child].below_flags, trie.nodes[child].below_depth,
                                  &trie.below_span[2 * child]):
                set_position_range(bits, trie.nodes[child].token_lo, trie.nodes[child].token_hi)
                self.n_marked += trie.nodes[child].token_hi - trie.nodes[child].token_lo
                return 0
        if trie.nodes[child].node_end - child >= SUBTREE_RECORD_MIN_NODES:
            return self.visit_recorded(trie, child, next_set, walk)
        self.trie_visit(trie, child, next_set, walk)
        return 0

    cdef int visit_recorded(self, const trie_view* trie, int32_t child, int32_t set_id, walk_state* walk) except -1 nogil:
        """trie_visit of a big subtree from a set, remembered: the marks it adds depend on the subtree and the set
        alone, and so do the nodes where its paths pop out, so the same subtree met again from the same set (the
        free tail of every node of a key-exclusion trie is one set, met under each first code point) replays
        them instead of walking. A visit that stopped part way (too many pops) is not remembered."""
        # (set ids stay below MAX_SETS = 2^20, so 21 bits hold one)
        cdef uint64_t key = (<uint64_t>child << 21 | <uint64_t>set_id) << 1 | (1 if walk.collect_pops else 0)
        cdef uint64_t* bits = self.position_bits.data()
        cdef int64_t w0 = trie.nodes[child].token_lo >> 6
        cdef int64_t w1 = (trie.nodes[child].token_hi + 63) >> 6
        cdef int64_t i, base, pops0 = 0, pop_nodes0 = walk.pop_nodes, marked0 = self.n_marked
        cdef uint64_t added
        cdef subtree_record record
        cdef flat_map[uint64_t, int32_t].iterator it = self.subtree_memo.find(key)
        if it != self.subtree_memo.end():
            record = self.subtree_records[deref(it).second]
            for i in range(record.words_start, record.words_start + record.n_words):
                bits[self.subtree_word_at[i]] |= self.subtree_words[i]
            self.n_marked += record.n_marked
            self.subtree_replays += 1
            if record.n_pops:
                for i in range(record.pops_start, record.pops_start + record.n_pops):
                    walk.pops.push_back(self.subtree_pops[i])
                walk.pop_nodes += record.pop_nodes
                if walk.pops.size() > walk.max_pops or \
                        <uint64_t>walk.pop_nodes > <uint64_t>walk.max_pops * CONTINUATION_NODES_PER_NODE:
                    walk.aborted = True
            return 0
        if w1 - w0 > SUBTREE_RECORD_MAX_WORDS or <int64_t>self.subtree_words.size() + (w1 - w0) > SUBTREE_RECORD_TOTAL_WORDS \
                or <int64_t>self.subtree_records.size() >= SUBTREE_RECORDS:
            self.trie_visit(trie, child, set_id, walk)
            return 0
        # (a stack of snapshots: the visit below records the big subtrees inside this one in turn)
        base = <int64_t>self.subtree_before.size()
        self.subtree_before.insert(self.subtree_before.end(), bits + w0, bits + w1)
        if walk.collect_pops:
            pops0 = <int64_t>walk.pops.size()
        self.trie_visit(trie, child, set_id, walk)
        if walk.aborted or (walk.collect_pops and <int64_t>self.subtree_pops.size() + <int64_t>walk.pops.size() - pops0
                            > SUBTREE_RECORD_TOTAL_POPS):
            self.subtree_before.resize(base)
            return 0
        bits = self.position_bits.data()
        record.words_start = <int64_t>self.subtree_words.size()
        for i in range(w0, w1):
            added = bits[i] & ~self.subtree_before[base + i - w0]
            if added:
                self.subtree_word_at.push_back(i)
                self.subtree_words.push_back(added)
        self.subtree_before.resize(base)
        record.n_words = <int64_t>self.subtree_words.size() - record.words_start
        record.pops_start = <int64_t>self.subtree_pops.size()
        record.n_pops = 0
        if walk.collect_pops:
            record.n_pops = <int64_t>walk.pops.size() - pops0
            for i in range(pops0, <int64_t>walk.pops.size()):
                self.subtree_pops.push_back(deref(walk.pops)[i])
        record.pop_nodes = walk.pop_nodes - pop_nodes0
        record.n_marked = self.n_marked - marked0
        self.subtree_memo[key] = <int32_t>self.subtree_records.size()
        self.subtree_records.push_back(record)
        return 0

    cdef bint take_run(self, const trie_view* trie, int32_t child, int32_t set_id, walk_state* walk) except -1 nogil:
        """Take the tokens that go on below a node (child; those ending at it are the caller's) along the bounded
        run its set lies on, visiting only where they leave the run.

        Along a run of R sets (set_id included; R unbounded when the run ends in a loop, as in `char*`) every
        code point of the run's class leads one set further. So,
        below the node, a token whose first min(length, R) code points are all in the class is accepted if
        it has at most R code points (an unfinished last character too, when the run takes every one; at
        exactly R, as the set after the run decides), and a longer one is what that set makes of the rest.
        The subtree is marked whole; then the exceptions -- the nodes within R code points of the child whose
        own code point leaves the class, the topmost on each path, looked up in the trie's index by code
        point and depth -- are cleared and visited from the run's set above them; and at the run's end,
        outside them, either (the set after the run small and plain: words_at_run_end) the tokens longer than
        R are cleared in words and only the nodes R + 1 down whose code point that set takes are visited, or
        the nodes R down with children or an unfinished character are visited one by one.

        No set of the run may hold SEGMENT_BASE (a path popping out of the segment there would have to be
        recorded) or a token terminal (it takes a token by id), and no token of the subtree may be marked
        already (a token terminal above did it; clearing would lose it). False: not taken (no run, exceptions
        dearer to look up than the subtree is to walk, a small subtree), the caller walks the node."""
        cdef uint64_t* bits
        cdef int32_t run, after, j, n_cps, top_depth
        cdef uint8_t flags = trie.nodes[child].child_flags
        cdef int64_t first_longer = trie.nodes[child].token_lo + trie.nodes[child].n_ending
        cdef uint64_t outside[2]
        cdef int64_t base, i, n_top, sets_base
        cdef int32_t depth0 = trie.nodes[child].node_depth, s
        cdef uint64_t* cover
        cdef bint completed, impure
        cdef int32_t list_id
        cdef vector[run_exception]* items
        cdef run_exception item
        if trie.nodes[child].node_end - child < TAKE_RUN_MIN_NODES or (flags & SUBTREE_OVERLONG_END):
            return False
        if not (self.sets.summaries[set_id].flags & SET_CLASS_KNOWN):
            self.sets.compute_loop(set_id)
        if self.sets.summaries[set_id].successor < 0 or self.sets.summaries[set_id].successor == set_id:
            return False   # (a set that loops on its class: chain_accepts and the child blocks take it, cheaper)
        if self.sets.summaries[set_id].run_length == RUN_UNKNOWN:
            self.sets.compute_run(set_id)
        run = self.sets.summaries[set_id].run_length   # RUN_UNBOUNDED: the run ends in a loop (`char*`), never
        after = self.sets.summaries[set_id].run_end
        impure = (self.sets.summaries[set_id].flags & SET_RUN_IMPURE) != 0
        while not impure and after >= 0 and run < RUN_UNBOUNDED and run < trie.nodes[child].below_depth:
            # a run computed from another set may stop where the class goes on (compute_run's depth bound):
            # the next run of the same class continues this one. Its class is read first: a run of another
            # class is never followed, so never computed (after `,` in an object of optional properties the
            # set's successor lies on `space`'s `[ \t]{0,20}`, twenty sets per property that follows)
            if not (self.sets.summaries[after].flags & SET_CLASS_KNOWN):
                self.sets.compute_loop(after)
            if not self.sets.same_class(set_id, after):
                break
            if self.sets.summaries[after].run_length == RUN_UNKNOWN:
                self.sets.compute_run(after)
            impure = (self.sets.summaries[after].flags & SET_RUN_IMPURE) != 0
            run = <int32_t>min(<int64_t>run + self.sets.summaries[after].run_length, <int64_t>RUN_UNBOUNDED)
            after = self.sets.summaries[after].run_end
        if (run < RUN_UNBOUNDED and after < 0) or impure \
                or ((flags & SUBTREE_PARTIAL_END) and not (self.sets.summaries[set_id].flags & SET_ALL_PARTIALS)) \
                or ((flags & SUBTREE_NON_ASCII) and not (self.sets.summaries[set_id].flags & SET_CLASS_NON_ASCII)):
            return False
        if run < TAKE_RUN_MIN_NODE_BY_NODE and trie.nodes[child].below_depth >= run \
                and not (depth0 + run < trie.n_longer and self.words_at_run_end(after)):
            # a short run whose end would be visited node by node (every child, or grandchild, one at a time):
            # the ordinary walk, which takes blocks of children whole, costs less (the mask after `{"` under
            # the key pattern the converter writes for additionalProperties, `[^"k] char*`, on Snowplow
            # sp_118: 1.15 -> 0.73 ms)
            return False
        outside[0] = trie.nodes[child].below_ascii[0] & ~self.sets.summaries[set_id].class_ascii[0]
        outside[1] = trie.nodes[child].below_ascii[1] & ~self.sets.summaries[set_id].class_ascii[1]
        n_cps = popcount64(outside[0]) + popcount64(outside[1])
        top_depth = min(run, trie.nodes[child].below_depth)   # the exceptions lie at most this deep below the child
        if <int64_t>n_cps * top_depth * TAKE_RUN_NODES_PER_LOOKUP > trie.nodes[child].node_end - child \
                or (n_cps == 0 and trie.nodes[child].below_depth <= run):
            return False   # dearer to look up than to walk, or nothing to do but what chain_accepts does
        bits = self.position_bits.data()
        if range_has_marks(bits, first_longer, trie.nodes[child].token_hi):
            return False   # a token terminal above marked tokens of it, which clearing would lose
        self.run_takes += 1
        set_position_range(bits, first_longer, trie.nodes[child].token_hi)
        self.n_marked += trie.nodes[child].token_hi - first_longer
        # The exceptions, shallower first: each covers its subtree, so deeper ones below it are skipped, and so
        # are the nodes at the run's end below it (run_end_nodes reads run_cover).
        if <int64_t>self.run_cover.size() != (trie.n_nodes + 63) >> 6:
            self.run_cover.assign((trie.n_nodes + 63) >> 6, 0)
        cover = self.run_cover.data()
        list_id = self.run_exception_list(trie, child, outside, top_depth)
        if list_id >= 0:
            items = &self.run_lists_items
            base = self.run_lists[list_id].start
            n_top = self.run_lists[list_id].count
            while n_top > 0 and items[0][base + n_top - 1].depth > depth0 + top_depth:
                n_top -= 1   # (a list may go deeper than this run; shallower first)
        else:
            items = &self.run_items
            base = <int64_t>self.run_items.size()
            self.scan_run_exceptions(trie, child, outside, top_depth)
            n_top = <int64_t>self.run_items.size() - base
        completed = False
        try:
            if run < RUN_UNBOUNDED:
                for i in range(base, base + n_top):
                    set_position_range(cover, items[0][i].node, items[0][i].node_end)
                self.run_end_nodes(trie, child, after, depth0 + run, walk)
            completed = True
        finally:
            if run < RUN_UNBOUNDED:
                for i in range(base, base + n_top):
                    clear_position_range(cover, items[0][i].node, items[0][i].node_end)
            if not completed and list_id < 0:
                self.run_items.resize(base)
        if walk.aborted or n_top == 0:
            if list_id < 0:
                self.run_items.resize(base)
            return True
        # the run's sets, S_0 = set_id: an exception j code points below the node is taken by S_(j-1) (if at all)
        sets_base = <int64_t>self.run_sets.size()
        self.run_sets.push_back(set_id)
        for j in range(1, top_depth):
            self.run_sets.push_back(self.sets.summaries[self.run_sets[sets_base + j - 1]].successor)
        for i in range(base, base + n_top):
            # (a copy: the visits below may grow either vector)
            item = items[0][i]
            if i + 1 < base + n_top:
                prefetch(&trie.nodes[items[0][i + 1].node])
            self.n_marked -= clear_range_counted(bits, item.token_lo, item.token_hi)
            s = self.run_sets[sets_base + item.depth - depth0 - 1]
            if self.set_may_take(s, item.cp):
                self.visit_child(trie, item.node, s, walk)
                if walk.aborted:
                    break
        self.run_sets.resize(sets_base)
        if list_id < 0:
            self.run_items.resize(base)
        return True

    cdef int scan_run_exceptions(self, const trie_view* trie, int32_t child, const uint64_t* outside,
                                 int32_t top_depth) except -1 nogil:
        """Append to run_items the exceptions of take_run below child, shallower first: the nodes within
        top_depth code points of it whose code point is in outside (ASCII bits), the topmost on each path
        (each is looked up in the trie's index by code point and depth). run_cover is all zero again after."""
        cdef uint64_t* cover = self.run_cover.data()
        cdef int64_t key, base = <int64_t>self.run_items.size(), i, n_levels = trie.n_levels
        cdef int32_t j, depth, x
        cdef uint64_t word
        cdef int half
        cdef const int32_t* first
        cdef const int32_t* last
        cdef const int32_t* it
        cdef run_exception item
        for j in range(1, top_depth + 1):
            depth = trie.nodes[child].node_depth + j
            for half in range(2):
                word = outside[half]
                while word:
                    key = (64 * half + ctz64(word)) * n_levels + depth
                    word &= word - 1
                    first = trie.ascii_level_nodes + trie.ascii_level_start[key]
                    last = trie.ascii_level_nodes + trie.ascii_level_start[key + 1]
                    if child != 0 and first < last:
                        first = lower_bound(first, last, child)
                        last = lower_bound(first, last, trie.nodes[child].node_end)
                    it = first
                    while it < last:
                        x = it[0]
                        it += 1
                        if not has_position(cover, x):
                            set_position_range(cover, x, trie.nodes[x].node_end)
                            item.node = x
                            item.node_end = trie.nodes[x].node_end
                            item.token_lo = trie.nodes[x].token_lo
                            item.token_hi = trie.nodes[x].token_hi
                            item.depth = depth
                            item.cp = trie.nodes[x].node_cp
                            self.run_items.push_back(item)
        for i in range(base, <int64_t>self.run_items.size()):
            clear_position_range(cover, self.run_items[i].node, self.run_items[i].node_end)
        return 0

    cdef int32_t run_exception_list(self, const trie_view* trie, int32_t child, const uint64_t* outside,
                                    int32_t top_depth) except -2 nogil:
        """The kept exceptions of take_run below a big subtree (RUN_LIST_MIN_NODES nodes or more) for these
        outside code points, scanned to top_depth or deeper: the id of the list, or -1 (a small subtree, or
        the lists full: the caller scans). Which nodes are topmost does not depend on how deep the scan goes,
        so a list serves every run as long: a length-limited string asks again at each position with one
        code point less, and the scan (thousands of look-ups and nodes from the root) is done once. A list
        too shallow is scanned again to the new depth."""
        cdef int32_t list_id, found = -1
        cdef int64_t base
        cdef run_exception_list header
        if trie.nodes[child].node_end - child < RUN_LIST_MIN_NODES:
            return -1
        for list_id in range(<int32_t>self.run_lists.size()):
            if self.run_lists[list_id].child == child and self.run_lists[list_id].outside_lo == outside[0] \
                    and self.run_lists[list_id].outside_hi == outside[1]:
                if self.run_lists[list_id].depth >= top_depth:
                    return list_id
                found = list_id
                break
        if (found < 0 and self.run_lists.size() >= MAX_RUN_LISTS) or self.run_lists_items.size() >= MAX_RUN_LIST_ITEMS:
            return -1
        base = <int64_t>self.run_items.size()
        self.scan_run_exceptions(trie, child, outside, top_depth)
        header.outside_lo = outside[0]
        header.outside_hi = outside[1]
        header.child = child
        header.depth = top_depth
        header.start = <int64_t>self.run_lists_items.size()
        header.count = <int64_t>self.run_items.size() - base
        self.run_lists_items.insert(self.run_lists_items.end(), self.run_items.begin() + base, self.run_items.end())
        self.run_items.resize(base)
        if found >= 0:
            self.run_lists[found] = header   # (its old items stay, counted against MAX_RUN_LIST_ITEMS)
            return found
        self.run_lists.push_back(header)
        return <int32_t>(self.run_lists.size() - 1)

    cdef bint set_may_take(self, int32_t set_id, uint32_t cp) except -1 nogil:
        """Whether cp lies in one of the set's viable intervals (some stack may take it)."""
        cdef int64_t k
        if self.sets.summaries[set_id].viable_start == VIABLE_UNKNOWN:
            self.sets.compute_viable(set_id)
        for k in range(self.sets.summaries[set_id].viable_start,
                       self.sets.summaries[set_id].viable_start + 2 * self.sets.summaries[set_id].viable_count, 2):
            if self.sets.viable_bounds[k] <= cp <= self.sets.viable_bounds[k + 1]:
                return True
        return False

    cdef int run_end_nodes(self, const trie_view* trie, int32_t child, int32_t after, int32_t depth,
                           walk_state* walk) except -1 nogil:
        """take_run at the run's end, D = depth code points from the root: what lies there or below, outside
        the exceptions (run_cover), is the set after the run's to decide (it is `after`)."""
        cdef uint64_t* bits = self.position_bits.data()
        cdef const uint64_t* cover = self.run_cover.data()
        cdef int64_t first_longer = trie.nodes[child].token_lo + trie.nodes[child].n_ending
        cdef int64_t key, i, j
        cdef int32_t member
        cdef uint32_t cp
        cdef const int32_t* first
        cdef const int32_t* last
        cdef const int32_t* it
        if trie.nodes[child].node_depth + trie.nodes[child].below_depth < depth or depth >= trie.n_levels:
            return 0   # no token gets there
        if depth < trie.n_longer and self.words_at_run_end(after):
            # in words: the tokens longer than D are cleared, the unfinished characters ending at D decided,
            # and only the nodes D + 1 down whose code point the set after the run takes are walked
            if trie.nodes[child].node_depth + trie.nodes[child].below_depth > depth:
                self.n_marked -= clear_masked_counted(bits, trie.longer_bits + depth * trie.position_words,
                                                      first_longer, trie.nodes[child].token_hi)
            first = lower_bound(trie.unclean_nodes + trie.unclean_start[depth],
                                trie.unclean_nodes + trie.unclean_start[depth + 1], child)
            last = lower_bound(first, trie.unclean_nodes + trie.unclean_start[depth + 1], trie.nodes[child].node_end)
            it = first
            while it < last:
                member = it[0]
                it += 1
                if has_position(cover, member):
                    continue   # below an exception: visited with it
                # (the endings inside a character, after those on a whole one)
                for i in range(trie.nodes[member].token_lo + trie.nodes[member].n_whole,
                               trie.nodes[member].token_lo + trie.nodes[member].n_ending):
                    if not self.sets.set_accepts_partial(after, trie.end_partial[i]):
                        self.n_marked -= clear_range_counted(bits, i, i + 1)
            if trie.nodes[child].node_depth + trie.nodes[child].below_depth > depth:
                for j in range(self.sets.summaries[after].viable_count):
                    for cp in range(self.sets.viable_bounds[self.sets.summaries[after].viable_start + 2 * j],
                                    self.sets.viable_bounds[self.sets.summaries[after].viable_start + 2 * j + 1] + 1):
                        key = cp * trie.n_levels + depth + 1
                        first = lower_bound(trie.ascii_level_nodes + trie.ascii_level_start[key],
                                            trie.ascii_level_nodes + trie.ascii_level_start[key + 1], child)
                        last = lower_bound(first, trie.ascii_level_nodes + trie.ascii_level_start[key + 1],
                                           trie.nodes[child].node_end)
                        it = first
                        while it < last:
                            member = it[0]
                            it += 1
                            if it < last:
                                prefetch(&trie.nodes[it[0]])
                            if has_position(cover, member):
                                continue
                            self.visit_child(trie, member, after, walk)
                            if walk.aborted:
                                return 0
        else:
            # node by node: those with children or a token ending inside a character
            first = lower_bound(trie.level_nodes + trie.level_start[depth],
                                trie.level_nodes + trie.level_start[depth + 1], child)
            last = lower_bound(first, trie.level_nodes + trie.level_start[depth + 1], trie.nodes[child].node_end)
            it = first
            while it < last:
                member = it[0]
                it += 1
                if it < last:
                    prefetch(&trie.nodes[it[0]])
                if has_position(cover, member):
                    continue
                self.n_marked -= clear_range_counted(bits, trie.nodes[member].token_lo, trie.nodes[member].token_hi)
                self.trie_visit(trie, member, after, walk)
                if walk.aborted:
                    return 0
        return 0

    cdef bint words_at_run_end(self, int32_t set_id) except -1 nogil:
        """Whether take_run can finish at a run's end in words with this set after the run: no SEGMENT_BASE
        and no token terminal on it (not even further along its own run), and it takes at most
        TAKE_RUN_MAX_CODE_POINTS code points, all ASCII."""
        cdef int32_t j, n = 0
        if self.sets.summaries[set_id].run_length == RUN_UNKNOWN:
            self.sets.compute_run(set_id)
        if self.sets.summaries[set_id].flags & SET_RUN_IMPURE:
            return False
        if self.sets.summaries[set_id].viable_start == VIABLE_UNKNOWN:
            self.sets.compute_viable(set_id)
        for j in range(self.sets.summaries[set_id].viable_count):
            if self.sets.viable_bounds[self.sets.summaries[set_id].viable_start + 2 * j + 1] >= 128:
                return False
            n += <int32_t>(self.sets.viable_bounds[self.sets.summaries[set_id].viable_start + 2 * j + 1]
                           - self.sets.viable_bounds[self.sets.summaries[set_id].viable_start + 2 * j]) + 1
            if n > TAKE_RUN_MAX_CODE_POINTS:
                return False
        return True

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
        if trie.nodes[node].token_hi > trie.nodes[node].token_lo:
            drain = drain_words(self.position_bits.data(), trie.nodes[node].token_lo >> 6,
                                ((trie.nodes[node].token_hi - 1) >> 6) + 1, trie.n_positions)
            while True:
                position = next_set_position(&drain)
                if position < 0:
                    break
                token = trie.token_at[position]
                tokens.push_back(token)
                if out != NULL:
                    set_token_bit(out, token)
        self.n_marked = 0
