# Included by _grammar.pyx. Grammar: one sequence's matcher over a MatchContext — its stacks, partial
# UTF-8 character, lazy trigger (_triggers.LazyTrigger) and rollback ring (_rollback.pxi); the mask API
# (apply, allowed_ids, fill_next_token_bitmask, allows), the accept API and the engines' matcher API
# (rollback, accept_tokens, validate_tokens, is_terminated, jump-forward, fork). It reaches the context
# only through MatchContext's locked entry points. Owns no ids.
# Declarations: _matcher.pxd (included by _grammar.pxd).


cdef class Grammar:
    """A matcher over Rules: llama.cpp's grammar state (stacks, partial UTF-8, lazy trigger).

    Filling a mask never changes the state; accepting a token does.
    """

    def __cinit__(self):
        self.state_lock = PyThread_allocate_lock()
        if self.state_lock == NULL:
            raise MemoryError("could not allocate the matcher's lock")
        self.lock_owner = 0
        self.lock_depth = 0

    def __dealloc__(self):
        if self.state_lock != NULL:
            PyThread_free_lock(self.state_lock)

    cdef int enter(self) except -1:
        """Take the matcher's lock (reentrant). Runs with the GIL, which guards lock_owner and lock_depth."""
        cdef unsigned long me = PyThread_get_thread_ident()
        if self.lock_depth and self.lock_owner == me:
            self.lock_depth += 1
            return 0
        if not PyThread_acquire_lock(self.state_lock, 0):
            with nogil:
                PyThread_acquire_lock(self.state_lock, 1)
        self.lock_owner = me
        self.lock_depth = 1
        return 0

    cdef void leave(self) noexcept:
        self.lock_depth -= 1
        if self.lock_depth == 0:
            self.lock_owner = 0
            PyThread_release_lock(self.state_lock)

    def __init__(self, rules, vocab=None, *, root="root", trigger_tokens=(), trigger_patterns=(),
                 trigger_words=(), lazy=None, max_stacks=DEFAULT_MAX_STACKS, precompute=DEFAULT_PRECOMPUTE_SECONDS,
                 max_rollback=DEFAULT_MAX_ROLLBACK):
        cdef Rules parsed
        if vocab is None and isinstance(rules, Rules):
            vocab = (<Rules>rules).vocab
        parsed = _as_rules(rules, vocab, root)
        if parsed.root_id < 0:
            raise ValueError("these Rules were parsed without a root (root=None); parse them with a root to match")
        if int(max_stacks) < 1:
            raise ValueError(f"max_stacks must be at least 1, got {max_stacks}")
        if not float(precompute) >= 0:
            raise ValueError(f"precompute must be a number of seconds >= 0, got {precompute!r}")
        max_rollback = _count(max_rollback, "max_rollback")
        if max_rollback > 1 << 20:
            raise ValueError(f"max_rollback must be at most {1 << 20}, got {max_rollback}")
        self.rules = parsed
        self.vocab = vocab
        self.ctx = _context_for(parsed, vocab, int(max_stacks), float(precompute))
        self.decoded = self.ctx.decoded
        self.partial.value = 0
        self.partial.n_remain = 0
        self.trigger = LazyTrigger(trigger_tokens, trigger_patterns, trigger_words)
        if lazy is None:
            lazy = bool(self.trigger.tokens or self.trigger.patterns)
        self.lazy = bool(lazy)
        self.awaiting_trigger = self.lazy
        self.eog_accepted = False
        self.history = RollbackRing(max_rollback, self.lazy)
        self._init_stacks()

    def _init_stacks(self):
        cdef vector[node_t] stacks
        cdef MatchContext ctx = self.ctx
        with nogil:
            ctx.initial_stacks(stacks)
        self.enter()
        self.active_stacks.swap(stacks)
        self.leave()

    def _require_vocab(self):
        if self.decoded is None:
            raise ValueError("this Grammar has no vocabulary; give Grammar(rules, vocab) to compute masks")

    def _rejected_indices(self, cnp.ndarray ids, bint whole_mask=False):
        self.enter()
        try:
            return self.ctx.rejected_indices(self.active_stacks, self.partial, ids, whole_mask)
        finally:
            self.leave()

    def _mask_words(self, reference=False):
        """The whole-vocabulary mask as uint32 words (bit set = allowed), fast path unless told otherwise."""
        self.enter()
        try:
            return self._mask_words_locked(reference)
        finally:
            self.leave()

    def _mask_words_locked(self, reference):
        cdef int64_t n_vocab = self.decoded.n_vocab
        cdef int64_t width = (n_vocab + 31) // 32
        cdef cnp.ndarray words
        if self.awaiting_trigger:
            words = np.full(width, 0xFFFFFFFF, dtype=np.uint32)
            if n_vocab % 32:
                words[width - 1] = (1 << (n_vocab % 32)) - 1
            return words
        return self.ctx.mask_words(self.active_stacks, self.partial, reference)

    def apply(self, logits):
        """Set the logits of every token llama.cpp's grammar sampler rejects to -inf, in place.

        logits: float32, C-contiguous, shape (n_vocab,).
        """
        cdef float* values
        cdef const uint32_t* bits
        cdef cnp.ndarray words
        cdef int64_t i, n
        self._require_vocab()
        _check_logits(logits, self.decoded.n_vocab)   # (writable C-contiguous float32 of n_vocab)
        if self.awaiting_trigger:
            return logits
        words = self._mask_words()
        bits = <const uint32_t*>cnp.PyArray_DATA(words)
        values = <float*>cnp.PyArray_DATA(<cnp.ndarray>logits)
        n = self.decoded.n_vocab
        with nogil:
            for i in range(n):
                if not (bits[i >> 5] >> (i & 31)) & 1:
                    values[i] = -INFINITY
        return logits

    def apply_candidates(self, ids, logits):
        """llama_sampler_apply on a candidate list: logits[i] = -inf where ids[i] is rejected."""
        self._require_vocab()
        ids = _id_array(self.decoded.n_vocab, ids)
        _check_logits(logits, ids.shape[0])
        if self.awaiting_trigger:
            return logits
        words = self._mask_words()
        allowed = (words[ids >> 5] >> (ids & 31).astype(np.uint32)) & 1
        logits[allowed == 0] = -np.inf
        return logits

    def allowed_ids(self, reference=False):
        """Sorted int32 array of the token ids the grammar allows next.

        reference=True computes it one token at a time as llama.cpp does (the
        path the fast one is checked against); the answer is the same.
        """
        self._require_vocab()
        words = self._mask_words(reference)
        bits = np.unpackbits(words.view(np.uint8), bitorder="little")[:self.decoded.n_vocab]
        return np.flatnonzero(bits).astype(np.int32)

    def fill_next_token_bitmask(self, bitmask, index=0):
        """Fill an int32 bitmask (bit set = allowed) of shape ((n_vocab + 31) // 32,) or (batch, that) at
        row index, in place: a numpy array or a CPU torch tensor (its memory, viewed without a copy)."""
        cdef cnp.ndarray row
        cdef MatchContext ctx = self.ctx
        self._require_vocab()
        # (a writable C-contiguous int32 row of the right width, checked: its memory is written through a
        # pointer, with no typed memoryview, so a mask allocates no object the cyclic GC tracks and a
        # collection of the caller's objects never starts inside the timed call)
        row = _bitmask_row(bitmask, index, (self.decoded.n_vocab + 31) // 32)
        self.enter()
        try:
            if not self.awaiting_trigger and self.partial.n_remain <= 0:
                if not self.ctx.fast_into(self.active_stacks, <uint32_t*>cnp.PyArray_DATA(row)):
                    row[:] = self._mask_words_locked(True).view(np.int32)
            elif not self.awaiting_trigger and self.partial.n_remain > 0 and self.ctx.partial_into(
                    self.active_stacks, self.partial, self.decoded.continuation_candidates(),
                    <uint32_t*>cnp.PyArray_DATA(row)):
                pass   # inside a character: written in place (as mask_words does it, without its array)
            else:
                row[:] = self._mask_words_locked(False).view(np.int32)
        finally:
            self.leave()
        return bitmask

    def allows(self, token_id):
        """Whether llama.cpp's grammar sampler leaves this token's logit finite.

        Answered from the token's own code points (MatchContext.token_allowed: about a microsecond once
        the state's transitions are memoized), inside a character or past a bound of the fast path by
        llama.cpp's one-token check."""
        cdef MatchContext ctx = self.ctx
        cdef token_t token
        cdef int status = 2
        self._require_vocab()
        value = _token_id(token_id)
        if not 0 <= value < self.decoded.n_vocab:
            _id_array(self.decoded.n_vocab, np.array([value], dtype=np.int64), "token id")   # (raises the ValueError)
        token = value
        self.enter()
        try:
            if self.awaiting_trigger:
                return True
            if self.partial.n_remain <= 0:
                try:
                    with nogil:
                        status = ctx.token_allowed(self.active_stacks, token)
                except GrammarError:
                    status = 2
                if status != 2:
                    return status == 1
            return self.ctx.rejected_indices(self.active_stacks, self.partial, np.array([token], dtype=np.int32),
                                             False).shape[0] == 0
        finally:
            self.leave()

    def is_dead(self):
        """Whether no token of the vocabulary can come next: the mask is empty (an end-of-generation token
        counts as allowed when the grammar is complete). A grammar dead from the start (every path needs a
        token the vocabulary does not have, or text no token spells) is known before generation: the
        runtime checks this once, and llama.cpp's sampler would abort on it mid-generation."""
        self._require_vocab()
        self.enter()
        try:
            if self.awaiting_trigger:
                return False
            return not self._mask_words_locked(False).any()
        finally:
            self.leave()

    # -- accepting -------------------------------------------------------------
    def _commit_token(self, token_t token, bytes piece):
        cdef vector[uint32_t] code_points
        cdef vector[node_t] stacks_new
        cdef partial_utf8 partial
        cdef const uint8_t* raw = <const uint8_t*>PyBytes_AS_STRING(piece)
        cdef Py_ssize_t size = len(piece)
        cdef MatchContext ctx = self.ctx
        self.enter()
        try:
            with nogil:
                partial = decode_utf8(raw, size, self.partial, code_points)
                ctx.accept_piece(self.active_stacks, token, code_points.data(), code_points.size() - 1, stacks_new)
            if stacks_new.empty():
                raise GrammarError(
                    f"Unexpected empty grammar stack after accepting piece: {piece.decode('utf-8', 'replace')} ({token})")
            self.active_stacks.swap(stacks_new)
            self.partial = partial
        finally:
            self.leave()

    def accept_token(self, token_id, piece):
        """llama_grammar_accept_token: advance by a token's piece (a token terminal matches by id).

        Raises GrammarError where llama.cpp throws (no stack survives); the state is then unchanged.
        """
        if not isinstance(piece, (bytes, bytearray)):
            raise TypeError(f"piece must be bytes, got {type(piece).__name__}")
        token = _token_id(token_id)
        if not 0 <= token <= 0x7FFFFFFF:
            raise ValueError(f"Invalid token id: {token} is outside [0, 2**31)")
        cdef vector[node_t] before
        cdef partial_utf8 partial_before
        self.enter()
        try:
            before = self.active_stacks
            partial_before = self.partial
            flags, trigger = self._state_extras()
            self._commit_token(token, bytes(piece))
            self.history.push(before, partial_before, flags, trigger)
        finally:
            self.leave()

    def accept_bytes(self, data):
        """llama_grammar_accept_str: advance by text (prefill), character by character.

        Raises GrammarError where llama.cpp throws; the state is then unchanged.
        """
        cdef vector[uint32_t] code_points
        cdef vector[node_t] current
        cdef partial_utf8 partial
        cdef bytes raw_bytes
        cdef const uint8_t* raw
        cdef Py_ssize_t size
        if isinstance(data, str):
            data = data.encode("utf-8")
        if not isinstance(data, (bytes, bytearray)):
            raise TypeError(f"data must be bytes or str, got {type(data).__name__}")
        raw_bytes = bytes(data)
        raw = <const uint8_t*>PyBytes_AS_STRING(raw_bytes)
        size = len(raw_bytes)
        cdef MatchContext ctx = self.ctx
        cdef partial_utf8 partial_before
        self.enter()
        try:
            current = self.active_stacks
            partial_before = self.partial
            flags, trigger = self._state_extras()
            with nogil:
                partial = decode_utf8(raw, size, self.partial, code_points)
                ctx.accept_text(current, code_points.data(), code_points.size() - 1)
            if current.empty():
                raise GrammarError(
                    f"Unexpected empty grammar stack after accepting piece: {raw_bytes.decode('utf-8', 'replace')}")
            self.active_stacks.swap(current)
            self.partial = partial
            # current now holds the stacks before: they become the newest rollback entry
            self.history.push(current, partial_before, flags, trigger)
        finally:
            self.leave()

    def accept(self, token_id):
        """llama_sampler_accept on the grammar sampler (llama_grammar_accept_impl).

        Handles the lazy trigger, end-of-generation tokens (accepted only when a
        stack is empty; llama.cpp aborts otherwise, this raises GrammarError) and
        raises GrammarError where llama.cpp throws, leaving the state unchanged.
        """
        if self.vocab is None:
            raise ValueError("this Grammar has no vocabulary; use accept_token(token_id, piece)")
        token = _token_id(token_id)
        if not 0 <= token < self.decoded.n_vocab:
            raise ValueError(f"Invalid token id: {token} is outside [0, {self.decoded.n_vocab})")
        self.enter()
        try:
            self.accept_step(token)
        finally:
            self.leave()

    cdef int accept_step(self, token_t token) except -1:
        """accept() of a checked id, with the matcher's lock held: one rollback step when it succeeds."""
        cdef vector[node_t] before
        cdef partial_utf8 partial_before = self.partial
        cdef uint8_t flags = (HISTORY_AWAITING if self.awaiting_trigger else 0) | (HISTORY_EOG if self.eog_accepted else 0)
        cdef bint is_eog = self.decoded.is_eog[token]
        trigger = None
        if self.history.capacity:
            before = self.active_stacks
            if self.lazy:
                trigger = self.trigger.state()
        if self.awaiting_trigger:
            self._accept_awaiting(token, self.vocab.piece(token))
        elif is_eog:
            if not self.complete:
                raise GrammarError(f"end-of-generation token {token} accepted while the grammar is not "
                                   "complete (llama.cpp aborts here)")
        else:
            self._commit_token(token, self.vocab.piece(token))
        if is_eog:
            self.eog_accepted = True
        self.history.push(before, partial_before, flags, trigger)
        return 0

    def _accept_awaiting(self, token, piece):
        """A token while the lazy grammar waits: buffered, or the trigger (a trigger token, or a pattern
        matching the text so far): then the grammar accepts from where the constrained text starts. Where
        it refuses that text, everything is as before this token, and GrammarError is raised."""
        cdef vector[node_t] stacks_before = self.active_stacks
        cdef partial_utf8 partial_before = self.partial
        trigger_before = self.trigger.state()
        replay = self.trigger.feed(token, piece)
        if replay is None:
            return
        self.awaiting_trigger = False
        try:
            for tok, text in replay:
                self._commit_token(tok, text)
        except GrammarError:
            self.active_stacks.swap(stacks_before)
            self.partial = partial_before
            self.awaiting_trigger = True
            self.trigger.restore(trigger_before)
            raise
        self.trigger.clear()

    # -- the engines' matcher API: rollback, accept_tokens, validate_tokens, jump-forward -----------
    def _state_extras(self):
        """(HISTORY_* flags, lazy trigger state or None) of the current state, as a rollback entry keeps them."""
        flags = (HISTORY_AWAITING if self.awaiting_trigger else 0) | (HISTORY_EOG if self.eog_accepted else 0)
        if not self.lazy:
            return flags, None
        return flags, self.trigger.state()

    def rollback(self, n=1):
        """Undo the last n accepted steps (tokens through accept/accept_token/accept_tokens, or one
        accept_bytes call each): the state, partial character, trigger state and termination are the
        ones before them. At most the last max_rollback steps are kept (fewer since reset() or a fresh
        matcher); asking for more raises ValueError and changes nothing."""
        cdef uint8_t flags
        n = _count(n, "rollback: n")
        self.enter()
        try:
            if n > self.history.count:
                raise ValueError(
                    f"cannot roll back {n} steps: this matcher keeps the last {self.history.count} "
                    f"(max_rollback={self.history.capacity}; steps before a reset() or past max_rollback are gone)")
            if n == 0:
                return
            trigger = self.history.take(n, self.active_stacks, &self.partial, &flags)
            self.awaiting_trigger = (flags & HISTORY_AWAITING) != 0
            self.eog_accepted = (flags & HISTORY_EOG) != 0
            if self.lazy:
                self.trigger.restore(trigger)
        finally:
            self.leave()

    @property
    def rollback_depth(self):
        """How many steps rollback() can undo now."""
        return self.history.count

    @property
    def max_rollback(self):
        """How many accepted steps this matcher keeps for rollback()."""
        return self.history.capacity

    cdef bint try_accept(self, token_t token) except -1:
        """One token of accept_tokens/validate_tokens: False where the grammar refuses it (the state is
        then unchanged) or an end-of-generation token was accepted before it (XGrammar's rule)."""
        if self.eog_accepted:
            return False
        try:
            self.accept_step(token)
        except GrammarError:
            return False
        return True

    def _transaction(self, list tokens, bint keep):
        """Accept tokens one by one until one is refused; keep the result (keep and all accepted) or
        undo it all, the rollback ring included. Returns how many were accepted."""
        cdef vector[node_t] start_stacks = self.active_stacks
        cdef partial_utf8 start_partial = self.partial
        cdef bint start_awaiting = self.awaiting_trigger, start_eog = self.eog_accepted
        cdef bint undo = True
        start_trigger = self.trigger.state() if self.lazy else None
        accepted = 0
        self.history.begin()
        try:
            for token in tokens:
                if not self.try_accept(token):
                    break
                accepted += 1
            undo = not (keep and accepted == len(tokens))
        finally:
            self.history.end(undo)
            if undo:
                self.active_stacks.swap(start_stacks)
                self.partial = start_partial
                self.awaiting_trigger = start_awaiting
                self.eog_accepted = start_eog
                if self.lazy:
                    self.trigger.restore(start_trigger)
        return accepted

    def accept_tokens(self, ids):
        """Accept all of ids (each as accept() does, one rollback step each) or none: True when every
        token was accepted; False, with the state and the rollback history unchanged, when the grammar
        refuses one or an end-of-generation token came before it. Ids that are not ints in
        [0, n_vocab) raise TypeError/ValueError before anything is accepted."""
        tokens = _token_list(ids, self.vocab, self.decoded)
        self.enter()
        try:
            if len(tokens) == 1:
                return self.try_accept(tokens[0])
            return self._transaction(tokens, True) == len(tokens)
        finally:
            self.leave()

    def validate_tokens(self, ids):
        """How many of ids, from the first, the grammar would accept in a row (stopping after an
        end-of-generation token); the state is unchanged."""
        tokens = _token_list(ids, self.vocab, self.decoded)
        self.enter()
        try:
            return self._transaction(tokens, False)
        finally:
            self.leave()

    def is_terminated(self):
        """XGrammar's is_terminated: an end-of-generation token has been accepted (the grammar was
        complete), or the grammar is complete and no token but an end-of-generation one can follow
        (llguidance's forced stop: nothing else can come). rollback() and reset() undo it."""
        self.enter()
        try:
            if self.eog_accepted:
                return True
            if self.awaiting_trigger or self.decoded is None or not self.complete:
                return False
            words = self._mask_words_locked(False)
            allowed = np.unpackbits(words.view(np.uint8), bitorder="little")[:self.decoded.n_vocab]
            allowed[np.asarray(self.vocab.eog_ids, dtype=np.int64)] = 0
            return not allowed.any()
        finally:
            self.leave()

    def jump_forward(self, max_bytes=DEFAULT_MAX_JUMP_FORWARD_BYTES):
        """The bytes the grammar forces from the current state: every text it accepts from here (in
        llama.cpp's code points, spelled in UTF-8) begins with them, and it cannot end before them.

        Inside a character (the last token ended mid-character) they start with its remaining
        continuation bytes, as far as the stacks agree on them; after that only whole characters are
        returned (as XGrammar's find_jump_forward_string does), since llama.cpp's decoder also reads
        overlong spellings inside one piece. Empty where the grammar may end, at a token terminal, while
        a lazy grammar waits for its trigger, and after an end-of-generation token. The state is
        unchanged; accept_bytes(result) takes it."""
        max_bytes = _count(max_bytes, "max_bytes")
        cdef vector[uint8_t] out
        cdef MatchContext ctx = self.ctx
        cdef size_t limit = max_bytes
        self.enter()
        try:
            if self.awaiting_trigger or self.eog_accepted or self.partial.n_remain < 0:
                return b""
            with nogil:
                ctx.forced_bytes(self.active_stacks, self.partial, limit, out)
        finally:
            self.leave()
        return bytes(out) if out.size() else b""

    def jump_forward_tokens(self, max_bytes=DEFAULT_MAX_JUMP_FORWARD_BYTES):
        """Token ids that spell jump_forward() (XGrammar's find_jump_forward_tokens): the longest
        piece of an ordinary token (not end-of-generation, not a control token) at each point, greedily,
        and the last one dropped when the piece of some longer ordinary token starts with it (the model
        may join it with what follows). Each is accepted by the grammar in turn; the list may stop
        short of the forced bytes (a tail no piece spells). This is the vocabulary's spelling, not the
        model tokenizer's: retokenize the whole text when the two must agree."""
        self._require_vocab()
        forced = self.jump_forward(max_bytes)
        if not forced:
            return []
        return _spell_forced(forced, self.vocab, self.decoded)

    def fork(self):
        """clone(): an independent copy, its rollback history included (XGrammar's fork)."""
        return self.clone()

    # -- state -----------------------------------------------------------------
    @property
    def complete(self):
        """True when some stack is empty: the grammar may end here (end-of-generation is allowed)."""
        cdef size_t i
        self.enter()
        try:
            for i in range(self.active_stacks.size()):
                if self.active_stacks[i] == EMPTY_STACK:
                    return True
            return False
        finally:
            self.leave()

    @property
    def stacks(self):
        """The stacks, each a list of (type, value) elements from bottom to top, in llama.cpp's order."""
        self.enter()
        try:
            return self.ctx.stack_elements(self.active_stacks)
        finally:
            self.leave()

    def _segment_report(self):
        """Test shim: per stack (None for the empty one), the segment entry that serves it, built if need
        be: (entry id, segment length, [(continuation node, trie nodes below it)], the stack below the
        segment)."""
        self.enter()
        try:
            stacks = list(self.active_stacks)
        finally:
            self.leave()
        return self.ctx._segment_report(stacks)

    @property
    def fast_masks(self):
        """Masks the context worked out with the trie walk (shared by the matchers of its Rules and Vocab)."""
        return self.ctx.fast_masks

    @property
    def cached_masks(self):
        """Masks the context answered from its cache."""
        return self.ctx.cached_masks

    @property
    def reference_masks(self):
        """Masks the context worked out one token at a time (states inside a UTF-8 character)."""
        return self.ctx.reference_masks

    @property
    def visited_nodes(self):
        return self.ctx.visited_nodes

    @property
    def context(self):
        """The MatchContext this matcher shares with the other matchers of its Rules and Vocab."""
        return self.ctx

    @property
    def n_stacks(self):
        self.enter()
        try:
            return self.active_stacks.size()
        finally:
            self.leave()

    @property
    def partial_utf8(self):
        """(value, n_remain) of the UTF-8 sequence the accepted text left open."""
        return (self.partial.value, self.partial.n_remain)

    @property
    def trigger_buffer(self):
        return bytes(self.trigger.buffer)

    @property
    def trigger_tokens(self):
        return self.trigger.tokens

    @property
    def trigger_patterns(self):
        return self.trigger.patterns

    def clone(self):
        """An independent copy of this matcher, sharing the Rules and the decoded vocabulary."""
        cdef Grammar other = Grammar.__new__(Grammar)
        self.enter()
        try:
            self._clone_into(other)
        finally:
            self.leave()
        return other

    def _clone_into(self, Grammar other):
        other.rules = self.rules
        other.vocab = self.vocab
        other.decoded = self.decoded
        other.ctx = self.ctx
        other.active_stacks = self.active_stacks
        other.partial = self.partial
        other.lazy = self.lazy
        other.awaiting_trigger = self.awaiting_trigger
        other.trigger = self.trigger.copy()
        other.eog_accepted = self.eog_accepted
        other.history = self.history.copy()

    def reset(self):
        """Back to the state of a fresh matcher (llama_sampler_reset on the grammar sampler); the
        rollback history is emptied."""
        self.enter()
        try:
            self.partial.value = 0
            self.partial.n_remain = 0
            self.awaiting_trigger = self.lazy
            self.trigger.clear()
            self.eog_accepted = False
            self.history.clear()
            self._init_stacks()
        finally:
            self.leave()

    def __repr__(self):
        return (f"<Grammar: {self.active_stacks.size()} stacks, complete={self.complete}, "
                f"awaiting_trigger={self.awaiting_trigger}>")
