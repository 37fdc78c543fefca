# Included by _grammar.pyx (one extension, so the hot calls stay within one C translation unit).
# MatchContext: what the matchers of one (Rules, Vocab) pair share, as a composition of the engine's parts
# (StackPool, StackSets, TrieWalk, SegmentCache, MaskCache) under one lock, with the locked entry points
# Grammar calls. Owns the lock and the mask counters; every id belongs to one of its parts.
# Declarations: _context.pxd (included by _grammar.pxd).


cdef class MatchContext:
    """What the matchers of one (Rules, Vocab) pair share: the stack-node pool, the stack sets,
    their transitions and summaries, the trie walk, the segment cache and the mask cache.

    Node and set ids mean the same to every matcher of the context, so a state one
    matcher worked out (a transition, a whole mask) serves all of them and every
    clone. Matchers call only the locked entry points, each of which takes the
    context's lock once around everything that may add to it.
    """

    def __cinit__(self):
        self.lock = PyThread_allocate_lock()
        if self.lock == NULL:
            raise MemoryError("could not allocate the grammar context's lock")

    def __init__(self, Rules rules, vocab, size_t max_stacks):
        cdef VocabTrie trie = vocab_trie(vocab) if vocab is not None else None
        self.rules = rules
        self.vocab = vocab
        self.decoded = decoded_vocab(vocab) if vocab is not None else None
        if vocab is not None:
            _check_token_ids(rules, self.decoded.n_vocab)
            for token_id in sorted(int(t) for t in vocab.eog_ids):
                self.eog_tokens.push_back(token_id)
        self.pool = StackPool(rules, max_stacks)
        self.sets = StackSets(self.pool, trie.max_depth if trie is not None else 0)
        self.walk = TrieWalk(self.pool, self.sets, trie)
        self.segments = SegmentCache(self.pool, self.sets, self.walk)
        self.masks = MaskCache(len(trie.token_words) if trie is not None else 0)

    def __dealloc__(self):
        if self.lock != NULL:
            PyThread_free_lock(self.lock)

    # -- figures (read by tests and benchmarks) ---------------------------------------------------
    @property
    def n_nodes(self):
        return self.pool.nodes.size()

    @property
    def n_sets(self):
        return self.sets.set_start.size() - 1

    @property
    def cache_bytes(self):
        """Memory held by the memoized nodes, sets, transitions, masks and segment entries, in bytes (approximate)."""
        return (self.pool.nodes.size() * 8 + self.pool.node_ids.size() * 32 + self.sets.set_nodes.size() * 4
                + self.sets.set_start.size() * 41 + self.sets.transitions.size() * 32
                + self.sets.pattern_transitions.size() * 40 + self.masks.memory_bytes()
                + self.walk.position_bits.size() * 8 + self.segments.segment_bytes
                + self.segments.segment_lengths.size() * 4 + self.segments.segment_nodes.size() * 40
                + self.segments.context_sets.size() * 24
                + self.walk.subtree_memo.size() * 16 + self.walk.subtree_records.size() * 48
                + self.walk.subtree_words.size() * 16 + self.walk.subtree_pops.size() * 4)

    @property
    def segment_bytes(self):
        """Memory held by the segment entries (accepted tokens and continuations), in bytes."""
        return self.segments.segment_bytes

    @property
    def segment_stats(self):
        """Counters of the segment cache: entries built and held, lookups served, walks grown, continuations walked."""
        return self.segments.segment_stats

    @property
    def max_fast_work(self):
        """The most work a completed fast mask took (for the figures)."""
        return self.pool.max_fast_work

    @property
    def last_reference_work(self):
        """The work of the last completed reference mask."""
        return self.pool.last_reference_work

    @property
    def visited_nodes(self):
        """Trie nodes the walks visited, in all."""
        return self.walk.visited_nodes

    @property
    def subtree_replays(self):
        """Subtrees whose walk from a set was replayed from a record (TrieWalk.visit_recorded)."""
        return self.walk.subtree_replays

    @property
    def run_takes(self):
        """Subtrees the walk took whole along a bounded run (a length-limited string)."""
        return self.walk.run_takes

    @property
    def segment_hits(self):
        return self.segments.counters.hits

    @property
    def segment_entries_built(self):
        return self.segments.counters.built

    @property
    def segment_walks_grown(self):
        return self.segments.counters.grown

    @property
    def continuation_walks(self):
        return self.segments.counters.continuation_walks

    @property
    def continuation_entries_built(self):
        return self.segments.counters.continuation_entries

    def _segment_entries(self):
        """Test shim: per segment entry, (segment length, accepted tokens or -1 when dense, continuations)."""
        return self.segments._segment_entries()

    def _element_ascii(self):
        """Test shim: per character class of the rules (its first element's position), the ASCII members
        element_info keeps (bits 0-63, bits 64-127) beside the same read by 128 match_char calls."""
        cdef const grammar_element* elements = self.rules.elements.data()
        cdef const grammar_element* after
        cdef size_t pos
        cdef uint32_t cp
        cdef uint64_t lo, hi
        result = []
        for pos in range(self.rules.elements.size()):
            if elements[pos].type not in (LLAMA_GRETYPE_CHAR, LLAMA_GRETYPE_CHAR_NOT, LLAMA_GRETYPE_CHAR_ANY):
                continue
            self.sets.element_info(<position_t>pos)
            lo = hi = 0
            for cp in range(64):
                if match_char(&elements[pos], cp, &after):
                    lo |= (<uint64_t>1) << cp
                if match_char(&elements[pos], cp + 64, &after):
                    hi |= (<uint64_t>1) << cp
            result.append((pos, (self.sets.element_ascii[2 * pos], self.sets.element_ascii[2 * pos + 1]), (lo, hi)))
        return result

    # -- the build ahead of use (_precompute.pxi) -------------------------------------------------
    def precompute(self, double seconds):
        """Build segment entries for the grammar's positions ahead of use, nearest the start first, for at
        most `seconds` (of this thread's time); returns the number built (_precompute.pxi's plan)."""
        return _precompute(self, seconds)

    def start_precompute(self, double seconds):
        """Build the segment cache ahead of use in a background thread, for at most `seconds` of that
        thread's time (precompute), and return at once: the caller's first masks do not wait for it
        (they build what they need on first use, and the thread then skips it). The thread takes the
        context's lock entry by entry with the GIL released, as every matcher does."""
        if self.walk.trie is None or seconds <= 0 or self.precompute_thread is not None:
            return
        thread = threading.Thread(target=_run_precompute, args=(self, seconds), name="bankml-precompute",
                                  daemon=True)
        self.precompute_thread = thread
        with _PRECOMPUTE_GUARD:
            _PRECOMPUTE_THREADS.add(thread)
        thread.start()

    def wait_precompute(self, timeout=None):
        """Wait for the background build (start_precompute) to end; True when it has (or none was started)."""
        thread = self.precompute_thread
        if thread is None:
            return True
        thread.join(timeout)
        return not thread.is_alive()

    cdef bint transparent_locked(self, position_t pos):
        cdef bint result
        with nogil:
            PyThread_acquire_lock(self.lock, 1)
            result = self.segments.transparent(pos)
            PyThread_release_lock(self.lock)
        return result

    cdef int32_t build_frames(self, list frames, bint whole) except -3:
        """SegmentCache.build_frames under the lock: the entry of a segment given as element positions."""
        with nogil:
            PyThread_acquire_lock(self.lock, 1)
        try:
            return self.segments.build_frames(frames, whole, &self.walk.trie_arrays)
        finally:
            PyThread_release_lock(self.lock)

    cdef void reserve_headroom(self) noexcept nogil:
        """Give every memo table room to grow by half again before it must rehash: a rehash of a table
        the build filled costs a whole mask's budget, and it would land on some unlucky later mask."""
        self.pool.reserve_headroom()
        self.sets.reserve_headroom()
        self.segments.reserve_headroom()
        self.masks.set_slot.reserve(1024)

    def _configure_budget(self, fast_work=None):
        """Test shim: the fast path's work budget per mask (FAST_WORK_BUDGET by default); forgets which sets
        went to the reference path."""
        with nogil:
            PyThread_acquire_lock(self.lock, 1)
            self.fast_failed.clear()
            self.masks.clear()
            PyThread_release_lock(self.lock)
        if fast_work is not None:
            self.pool.fast_work_budget = int(fast_work)

    def _configure_segments(self, enabled=None, max_continuations=None):
        """Test and benchmark shim: turn the segment cache on or off, or change its continuation limit.
        Forgets every cached mask and entry, so the next masks are computed afresh."""
        with nogil:
            PyThread_acquire_lock(self.lock, 1)
            self.segments.clear_segments()
            self.masks.clear()
            PyThread_release_lock(self.lock)
        if enabled is not None:
            self.segments.use_segments = bool(enabled)
        if max_continuations is not None:
            self.segments.continuations_limit = int(max_continuations)

    # -- the locked entry points -------------------------------------------------------------------
    cdef int initial_stacks(self, vector[node_t]& stacks) except -1 nogil:
        """llama_grammar_init_impl's stacks: each alternative of the root, advanced to its terminals."""
        cdef const grammar_element* elements = self.pool.rules.elements.data()
        cdef position_t pos = self.pool.rules.rule_start[self.pool.rules.root_id]
        cdef node_t stack
        PyThread_acquire_lock(self.lock, 1)
        try:
            while True:
                stack = EMPTY_STACK
                if not is_end_of_sequence(&elements[pos]):
                    stack = self.pool.push(EMPTY_STACK, pos)
                self.pool.advance_stack(stack, stacks)
                while not is_end_of_sequence(&elements[pos]):
                    pos += 1
                if elements[pos].type == LLAMA_GRETYPE_ALT:
                    pos += 1
                else:
                    break
        finally:
            PyThread_release_lock(self.lock)
        return 0

    cdef int accept_piece(self, const vector[node_t]& stacks, token_t token, const uint32_t* code_points,
                          size_t n_code_points, vector[node_t]& stacks_new) except -1 nogil:
        """accept_token_stacks under the lock."""
        PyThread_acquire_lock(self.lock, 1)
        try:
            self.pool.accept_token_stacks(stacks, token, code_points, n_code_points, stacks_new)
        finally:
            PyThread_release_lock(self.lock)
        return 0

    cdef int accept_text(self, vector[node_t]& stacks, const uint32_t* code_points, size_t n_code_points) \
            except -1 nogil:
        """llama_grammar_accept_str: the stacks after the code points, one at a time (accept_chr), in place;
        empty when none survives."""
        cdef vector[node_t] next_stacks
        cdef size_t i, j
        PyThread_acquire_lock(self.lock, 1)
        try:
            for i in range(n_code_points):
                next_stacks.clear()
                for j in range(stacks.size()):
                    self.pool.accept_chr(stacks[j], code_points[i], next_stacks)
                stacks.swap(next_stacks)
                if stacks.size() > self.pool.max_stacks:
                    with gil:
                        raise GrammarError(
                            f"grammar state exceeds {self.pool.max_stacks} stacks (max_stacks); "
                            "the grammar is too ambiguous at this point")
                if stacks.empty():
                    break
        finally:
            PyThread_release_lock(self.lock)
        return 0

    cdef int reject_tokens(self, const vector[node_t]& stacks, partial_utf8 state, const vocab_view* vocab,
                           const token_t* ids, int64_t n, vector[grammar_candidate]& rejects, bint whole_mask) \
            except -1 nogil:
        """The reference path: collect_rejects under the lock, within REFERENCE_WORK_BUDGET (whole_mask:
        this answers a mask, counted in reference_masks)."""
        cdef vector[uint32_t] scratch
        PyThread_acquire_lock(self.lock, 1)
        try:
            if whole_mask:
                self.reference_masks += 1
            self.pool.reference_work = 0
            self.pool.work = 0   # (advance_stack adds its steps: they count against the budget too)
            self.pool.collect_rejects(stacks, state, vocab, ids, n, rejects, scratch)
            self.pool.last_reference_work = self.pool.reference_work + self.pool.work
        finally:
            PyThread_release_lock(self.lock)
        return 0

    cdef int mask_into(self, const vector[node_t]& stacks, uint32_t* out) except -1 nogil:
        """fast_mask under the lock: 0, or 1 when the state is answered on the reference path."""
        PyThread_acquire_lock(self.lock, 1)
        try:
            return self.fast_mask(stacks, &self.walk.trie_arrays, out)
        finally:
            PyThread_release_lock(self.lock)

    cdef int token_allowed(self, const vector[node_t]& stacks, token_t token) except -1 nogil:
        """Whether the fast path's mask of these stacks allows one token, without building the mask: 1 or
        0, or 2 when this state is answered on the reference path (a bound of the fast path; the caller's
        job). Exact for a state whose accepted text ends on a whole character.

        A cached mask of the set answers with one bit. Otherwise the token's own code points are followed
        from the whole set through the memoized transitions, deciding as the trie walk decides at each
        node on that path (walk_mask, which the segment cache is held equal to): a token terminal on a
        stack takes a longer token by id, a token that ends on a whole character with some stack alive
        is accepted, one that ends inside a character as a stack takes the rest of it.
        """
        cdef const vocab_view* vocab
        cdef const grammar_element* elements = self.pool.rules.elements.data()
        cdef const grammar_element* top
        cdef const trie_view* trie = &self.walk.trie_arrays
        cdef vector[node_t] current
        cdef int32_t set_id
        cdef int64_t width = (trie.n_vocab + 31) >> 5, slot, k
        cdef int32_t position
        cdef const uint32_t* cp
        cdef node_t stack
        cdef int result = 0
        PyThread_acquire_lock(self.lock, 1)
        try:
            current = stacks
            set_id = self.sets.intern_set(current)
            slot = self.masks.slot_of_set(set_id)
            if slot != NO_SLOT:
                return self.masks.slot_bit(slot, token)
            if self.fast_failed.count(set_id):
                return 2
            if self.eog_tokens.size() and find(self.eog_tokens.begin(), self.eog_tokens.end(), token) \
                    != self.eog_tokens.end():
                for k in range(self.sets.set_start[set_id], self.sets.set_start[set_id + 1]):
                    if self.sets.set_nodes[k] == EMPTY_STACK:
                        return 1
                return 0
            position = trie.position_of[token]
            if position < 0:
                return 0   # empty, or an invalid sequence: never in a mask
            return self.path_allowed(set_id, token, self.decoded.code_points.data()
                                     + self.decoded.code_point_start[token], trie.end_partial[position])
        finally:
            PyThread_release_lock(self.lock)

    cdef int path_allowed(self, int32_t set_id, token_t token, const uint32_t* cp, partial_utf8 end) \
            except -1 nogil:
        """1 when the token whose code points (0-terminated) and end state are given is accepted from the
        set, else 0: the trie walk's decisions along the token's one path, which are llama.cpp's
        (reject_candidates_for_stack): a token terminal takes by id a token with code points left, a
        token whose code points are over is accepted on a whole character by any stack, and inside one
        by a character class that takes the rest of it (match_partial_char)."""
        cdef const grammar_element* elements = self.pool.rules.elements.data()
        cdef const grammar_element* top
        cdef node_t stack
        cdef int64_t k
        while True:
            if cp[0] != 0:
                # a token terminal on a stack takes the token by id, whatever text remains
                for k in range(self.sets.set_start[set_id], self.sets.set_start[set_id + 1]):
                    stack = self.sets.set_nodes[k]
                    if is_bottom(stack):
                        continue
                    top = &elements[self.pool.nodes[stack].element]
                    if (top.type == LLAMA_GRETYPE_TOKEN and top.value == <uint32_t>token) or \
                            (top.type == LLAMA_GRETYPE_TOKEN_NOT and top.value != <uint32_t>token):
                        return 1
            if cp[0] == 0:
                break
            set_id = self.sets.transition(set_id, cp[0])
            if set_id < 0:
                return 0
            cp += 1
        if end.n_remain == 0:
            return 1
        return 1 if self.sets.set_accepts_partial(set_id, end) else 0

    cdef int partial_mask_into(self, const vector[node_t]& stacks, partial_utf8 state, const vocab_view* vocab,
                               const token_t* candidates, int64_t n, uint32_t* out) except -1 nogil:
        """The mask of a state left inside a character (state: its partial UTF-8) into out: 0, or 2 when
        this set is answered on the reference path. Only the candidates (the tokens that open with a
        continuation byte, and the end-of-generation ids) can be allowed; they are checked by llama.cpp's
        own path (collect_rejects: a few hundred tokens, tens of µs; following each along its path through
        the memoized transitions measured slower on first visits), and the mask is kept in the mask cache
        under the set and the open character, so a state seen before is one copy."""
        cdef vector[node_t] current
        cdef vector[grammar_candidate] rejects
        cdef vector[uint32_t] scratch
        cdef int32_t set_id
        cdef int64_t width = (self.walk.trie_arrays.n_vocab + 31) >> 5, i
        cdef size_t k
        cdef token_t token
        cdef uint64_t key
        cdef int64_t slot
        cdef bint shared
        PyThread_acquire_lock(self.lock, 1)
        try:
            current = stacks
            set_id = self.sets.intern_set(current)
            # The mask depends on the set and the open character alone (value < 2^21, n_remain 1-3); on the
            # bytes still to come alone (value: SHARED_PARTIAL_VALUE) when the set takes every code point
            # >= 0x80 alike and the open character completes to one whatever those bytes are: llama.cpp's
            # decoder then yields a code point >= 0x80 (value >= 2 before the last byte; >= 1 before two or
            # three), which matches the same stacks whichever it is, and a piece that stops short leaves a
            # partial range above 0x80, which match_partial_char decides alike for such classes.
            shared = ((state.n_remain == 1 and state.value >= 2) or (state.n_remain >= 2 and state.value >= 1)) \
                and self.sets.constant_above(set_id)
            key = (<uint64_t><uint32_t>set_id << 32) | \
                (<uint64_t>(SHARED_PARTIAL_VALUE if shared else state.value) << 2) | <uint32_t>state.n_remain
            slot = self.masks.slot_of_partial(key)
            if slot != NO_SLOT:
                self.masks.copy_slot(slot, out)
                self.cached_masks += 1
                if shared:
                    self.partial_shared += 1
                return 0
            self.partial_masks += 1
            self.pool.reference_work = 0
            self.pool.work = 0
            self.pool.collect_rejects(stacks, state, vocab, candidates, n, rejects, scratch)
            memset(out, 0, width * sizeof(uint32_t))
            for i in range(n):
                token = candidates[i]
                set_token_bit(out, token)
            for k in range(rejects.size()):
                token = candidates[rejects[k].index]
                clear_token_bit(out, token)
            self.masks.keep_partial(key, out)
        finally:
            PyThread_release_lock(self.lock)
        return 0

    cdef list stack_elements(self, const vector[node_t]& stacks):
        """Each stack as a list of (type, value) elements from bottom to top (the node pool may grow, and
        move, under another matcher's hands: read under the lock)."""
        cdef list out = []
        cdef node_t node
        cdef grammar_element element
        cdef size_t i
        with nogil:
            PyThread_acquire_lock(self.lock, 1)
        try:
            for i in range(stacks.size()):
                current = []
                node = stacks[i]
                while node != EMPTY_STACK:
                    element = self.pool.rules.elements[self.pool.nodes[node].element]
                    current.append((<int>element.type, <int>element.value))
                    node = self.pool.nodes[node].parent
                current.reverse()
                out.append(current)
        finally:
            PyThread_release_lock(self.lock)
        return out

    cdef int forced_bytes(self, const vector[node_t]& start, partial_utf8 partial, size_t max_bytes,
                          vector[uint8_t]& out) except -1 nogil:
        """StackPool.forced_bytes under the lock: the bytes every continuation of the state begins with."""
        PyThread_acquire_lock(self.lock, 1)
        try:
            self.pool.forced_bytes(start, partial, max_bytes, out)
        finally:
            PyThread_release_lock(self.lock)
        return 0

    # -- the mask of a state: which path answers it (with the GIL; the entry points above take the lock) --
    cdef object rejected_indices(self, const vector[node_t]& stacks, partial_utf8 partial, cnp.ndarray ids,
                                 bint whole_mask):
        """The reference path (llama.cpp's reject_candidates): the indices into ids (int32) it rejects."""
        cdef const token_t[::1] id_view = ids
        cdef vector[grammar_candidate] rejects
        cdef int64_t n = ids.shape[0]
        cdef cnp.ndarray out
        cdef int64_t[::1] out_view
        cdef size_t k
        cdef vocab_view vocab = self.decoded.view()
        if n == 0:
            return np.empty(0, dtype=np.int64)
        with nogil:
            self.reject_tokens(stacks, partial, &vocab, &id_view[0], n, rejects, whole_mask)
        out = np.empty(rejects.size(), dtype=np.int64)
        out_view = out
        for k in range(rejects.size()):
            out_view[k] = rejects[k].index
        return out

    cdef bint fast_into(self, const vector[node_t]& stacks, uint32_t* out) except -1:
        """The fast path's mask into out; False when this state is answered on the reference path instead
        (the fast path ran past one of its bounds)."""
        cdef int status = 1
        try:
            with nogil:
                status = self.mask_into(stacks, out)
        except GrammarError:
            return False
        return status == 0

    cdef bint partial_into(self, const vector[node_t]& stacks, partial_utf8 partial, object candidates,
                           uint32_t* out) except -1:
        """The mask of a state inside a character into out from the candidates; False when it is answered on
        the reference path instead."""
        cdef const token_t[::1] ids = candidates
        cdef vocab_view vocab = self.decoded.view()
        cdef int status = 2
        if ids.shape[0] == 0:
            return False
        try:
            with nogil:
                status = self.partial_mask_into(stacks, partial, &vocab, &ids[0], ids.shape[0], out)
        except GrammarError:
            return False
        return status == 0

    cdef object mask_words(self, const vector[node_t]& stacks, partial_utf8 partial, bint reference):
        """The whole-vocabulary mask of a state as uint32 words (bit set = allowed): the fast path, the
        partial-character path inside a character, llama.cpp's own one-by-one check past their bounds or
        when asked (reference)."""
        cdef int64_t n_vocab = self.decoded.n_vocab
        cdef int64_t width = (n_vocab + 31) // 32
        cdef cnp.ndarray words = np.zeros(width, dtype=np.uint32)
        cdef uint32_t* view = <uint32_t*>cnp.PyArray_DATA(words)
        if not reference and partial.n_remain <= 0:
            if self.fast_into(stacks, view):
                return words
            reference = True  # past a bound of the fast path: llama.cpp's own way gives the mask
        if not reference and partial.n_remain > 0:
            # Inside a character only a piece that opens with a continuation byte can decode (any other
            # leaves llama.cpp's decoder an invalid sequence, rejected by every stack), and an
            # end-of-generation token is decided by the stacks: check just those (kept per set and open
            # character in the mask cache).
            candidates = self.decoded.continuation_candidates()
            if self.partial_into(stacks, partial, candidates, view):
                return words
            # (past a bound of the fast path: one by one, as llama.cpp does)
            allowed = np.zeros(width * 32, dtype=bool)
            allowed[candidates] = True
            allowed[candidates[self.rejected_indices(stacks, partial, candidates, True)]] = False
            return np.packbits(allowed, bitorder="little").view(np.uint32)
        allowed = np.ones(width * 32, dtype=bool)
        allowed[n_vocab:] = False
        allowed[self.rejected_indices(stacks, partial, np.arange(n_vocab, dtype=np.int32), True)] = False
        return np.packbits(allowed, bitorder="little").view(np.uint32)

    def _segment_report(self, stacks):
        """Test shim: per stack id (None for the empty one), the segment entry that serves it, built if
        need be: (entry id, segment length, [(continuation node, trie nodes below it)], the stack below)."""
        cdef node_t below, stack
        cdef int32_t entry_id
        cdef segment_entry entry
        report = []
        for stack in stacks:
            if stack == EMPTY_STACK:
                report.append(None)
                continue
            with nogil:
                PyThread_acquire_lock(self.lock, 1)
            try:
                self.walk.ensure_position_bits()
                with nogil:
                    entry_id = self.segments.find_entry(stack, &self.walk.trie_arrays, &below)
                entry = self.segments.entries[entry_id]
                conts = [self.segments.entry_continuations[entry.continuations_start + c] for c in range(entry.n_continuations)]
            finally:
                PyThread_release_lock(self.lock)
            report.append((entry_id, entry.length, [(c, self.walk.trie_arrays.nodes[c].node_end - c) for c in conts], below))
        return report

    cdef int fast_mask(self, const vector[node_t]& stacks, const trie_view* trie, uint32_t* out) except -1 nogil:
        """The whole-vocabulary mask of the current stacks (bit set = allowed) into out: 0, or 1 when this
        set is answered on the reference path (the caller's job; out is then unspecified).

        Exact for a state whose accepted text ends on a whole character; the
        caller sends other states down the reference path. A set seen before is
        copied from the mask cache; otherwise the mask is the union over the
        set's stacks of their segment entries (or, with the segment cache off,
        one trie walk from the whole set). Past one of its bounds (its work
        budget, max_stacks over a set, a stack too deep for a segment) it raises
        GrammarError and remembers the set: the caller then answers on the
        reference path, which gives llama.cpp's mask or its own clear error.
        """
        cdef vector[node_t] current = stacks
        cdef int32_t set_id = self.sets.intern_set(current)
        cdef int64_t width = (trie.n_vocab + 31) >> 5
        cdef int64_t slot, k
        cdef token_t token
        cdef bint allow_eog = False, completed
        slot = self.masks.slot_of_set(set_id)
        if slot != NO_SLOT:
            self.masks.copy_slot(slot, out)
            self.cached_masks += 1
            return 0
        if self.fast_failed.count(set_id):
            return 1
        self.fast_masks += 1
        self.walk.ensure_position_bits()
        completed = False
        self.pool.work = 0
        self.pool.work_limit = self.pool.fast_work_budget
        try:
            if self.segments.use_segments:
                self.segments.segment_mask(set_id, trie, out)
            else:
                self.walk.walk_mask(set_id, trie, out)
            completed = True
        finally:
            self.pool.work_limit = NO_WORK_LIMIT
            if completed and self.pool.work > self.pool.max_fast_work:
                self.pool.max_fast_work = self.pool.work
            if not completed:
                # (a GrammarError mid-walk, a bound of the fast path: position_bits must be all zero again
                # for the next walk, and this set's masks come from the reference path from now on)
                memset(self.walk.position_bits.data(), 0, self.walk.position_bits.size() * sizeof(uint64_t))
                self.walk.n_marked = 0
                self.fast_failed.insert(set_id)
                self.fallback_masks += 1
        for k in range(self.sets.set_start[set_id], self.sets.set_start[set_id + 1]):
            if self.sets.set_nodes[k] == EMPTY_STACK:
                allow_eog = True
        if allow_eog:
            for k in range(<int64_t>self.eog_tokens.size()):
                token = self.eog_tokens[k]
                set_token_bit(out, token)
        if self.segments.use_segments and self.segments.compose_cost <= width:
            # composed from the segment cache about as fast as copied back from the mask cache (and
            # copying it in, to memory long out of the processor's caches, would cost more)
            return 0
        self.masks.keep_set(set_id, out)
        return 0
