# Included by _grammar.pyx (one extension, so the hot calls stay within one C translation unit).
# The stack-node pool and llama.cpp's reference path over it: hash-consed persistent stacks (a stack
# is one node id), advance_stack, accept_chr, accept_token, reject_candidates(_for_stack), and the work
# budgets every expansion counts against. Owns node ids.
# Declarations: _stacks.pxd (included by _grammar.pxd).


cdef class StackPool:
    """The stack-node pool: hash-consed persistent stacks (node ids), and llama.cpp's reference path over them."""

    def __cinit__(self, Rules rules, size_t max_stacks):
        cdef stack_node root
        self.rules = rules
        self.max_stacks = max_stacks
        root.element = -1
        root.parent = -1
        self.nodes.push_back(root)   # EMPTY_STACK
        root.element = -2
        self.nodes.push_back(root)   # SEGMENT_BASE
        self.work_limit = NO_WORK_LIMIT
        self.fast_work_budget = FAST_WORK_BUDGET

    cdef int charge(self, int64_t steps) except -1 nogil:
        """Count steps of the fast path against the current mask's work budget; past it, raise (the caller
        then answers the mask on the reference path)."""
        self.work += steps
        if self.work > self.work_limit:
            with gil:
                raise GrammarError(f"fast path: the mask exceeds its work budget of {self.fast_work_budget} "
                                   "steps (FAST_WORK_BUDGET)")
        return 0

    cdef void reserve_headroom(self) noexcept nogil:
        self.node_ids.reserve(self.node_ids.size() * 3 // 2 + 1024)

    cdef node_t push(self, node_t parent, position_t element) except -1 nogil:
        cdef uint64_t key = (<uint64_t><uint32_t>parent << 32) | <uint32_t>element
        cdef stack_node node
        cdef node_t node_id
        it = self.node_ids.find(key)
        if it != self.node_ids.end():
            return deref(it).second
        if self.nodes.size() >= MAX_NODES:
            with gil:
                raise GrammarError(f"grammar state exceeds {MAX_NODES} stack nodes")
        node.element = element
        node.parent = parent
        node_id = <node_t>self.nodes.size()
        self.nodes.push_back(node)
        self.node_ids[key] = node_id
        return node_id

    cdef int advance_stack(self, node_t stack, vector[node_t]& new_stacks) except -1 nogil:
        """Expand a stack into the stacks that all end at a terminal (or are empty)."""
        cdef const grammar_element* elements = self.rules.elements.data()
        # todo and seen are scratch kept by the context (advance_stack never runs inside itself), so a
        # call allocates nothing; seen mostly holds few entries, where a linear search beats hashing, and
        # moves to a hash set when it grows (a rule of thousands of alternatives)
        cdef node_t current, next_stack
        cdef position_t pos, subpos
        cdef int64_t steps = 0, searched = 0
        cdef bint hashed = False
        cdef size_t i
        self.advance_todo.clear()
        self.advance_seen.clear()
        self.advance_todo.push_back(stack)
        while not self.advance_todo.empty():
            current = self.advance_todo.back()
            self.advance_todo.pop_back()
            steps += 1
            if steps > MAX_ADVANCE_STEPS:
                with gil:
                    raise GrammarError(
                        f"grammar expansion exceeds {MAX_ADVANCE_STEPS} steps in one advance_stack "
                        "(MAX_ADVANCE_STEPS); the grammar expands too far without matching a character")
            if self.work + steps + (searched >> 3) > self.work_limit:
                self.charge(steps + (searched >> 3))   # (raises)
            if hashed:
                if not self.advance_seen_set.insert(current).second:
                    continue
            else:
                if find(self.advance_seen.begin(), self.advance_seen.end(), current) != self.advance_seen.end():
                    continue
                self.advance_seen.push_back(current)
                if self.advance_seen.size() > 32:
                    hashed = True
                    self.advance_seen_set.clear()
                    for i in range(self.advance_seen.size()):
                        self.advance_seen_set.insert(self.advance_seen[i])
            if is_bottom(current):
                searched += new_stacks.size()   # (the linear search of add_unique, for the work budget)
                add_unique(new_stacks, current)
                continue
            pos = self.nodes[current].element
            if elements[pos].type == LLAMA_GRETYPE_RULE_REF:
                subpos = self.rules.rule_start[elements[pos].value]
                while True:
                    next_stack = self.nodes[current].parent
                    if not is_end_of_sequence(&elements[pos + 1]):
                        next_stack = self.push(next_stack, pos + 1)
                    if not is_end_of_sequence(&elements[subpos]):
                        next_stack = self.push(next_stack, subpos)
                    self.advance_todo.push_back(next_stack)
                    while not is_end_of_sequence(&elements[subpos]):
                        subpos += 1
                    if elements[subpos].type == LLAMA_GRETYPE_ALT:
                        subpos += 1
                    else:
                        break
            elif (elements[pos].type == LLAMA_GRETYPE_CHAR or elements[pos].type == LLAMA_GRETYPE_CHAR_NOT
                  or elements[pos].type == LLAMA_GRETYPE_CHAR_ANY or is_token_element(&elements[pos])):
                searched += new_stacks.size()
                add_unique(new_stacks, current)
                if new_stacks.size() > self.max_stacks:
                    with gil:
                        raise GrammarError(
                            f"grammar state exceeds {self.max_stacks} stacks (max_stacks); "
                            "the grammar is too ambiguous at this point")
            else:
                with gil:
                    raise GrammarError("internal error: a stack rests on a non-terminal element")
        self.work += steps + (searched >> 3)
        return 0

    cdef int accept_chr(self, node_t stack, uint32_t chr, vector[node_t]& new_stacks) except -1 nogil:
        cdef const grammar_element* elements = self.rules.elements.data()
        cdef const grammar_element* after
        cdef node_t next_stack
        if stack == EMPTY_STACK:
            return 0
        cdef const grammar_element* pos = &elements[self.nodes[stack].element]
        if is_token_element(pos):
            return 0
        if match_char(pos, chr, &after):
            next_stack = self.nodes[stack].parent
            if not is_end_of_sequence(after):
                next_stack = self.push(next_stack, <position_t>(after - elements))
            self.advance_stack(next_stack, new_stacks)
        return 0

    cdef int accept_token_stacks(self, const vector[node_t]& stacks, token_t token, const uint32_t* code_points,
                                 size_t n_code_points, vector[node_t]& stacks_new) except -1 nogil:
        """llama_grammar_accept_token over the stacks: a token terminal matches by id, anything else the
        token's code points one by one (accept_chr); the surviving stacks are added to stacks_new."""
        cdef const grammar_element* elements = self.rules.elements.data()
        cdef vector[node_t] current_stacks, next_stacks
        cdef size_t c
        cdef node_t stack, next_stack
        cdef position_t pos
        cdef size_t i, j
        for i in range(stacks.size()):
            stack = stacks[i]
            if stack == EMPTY_STACK:
                continue
            pos = self.nodes[stack].element
            if is_token_element(&elements[pos]):
                if match_token(&elements[pos], token):
                    next_stack = self.nodes[stack].parent
                    if not is_end_of_sequence(&elements[pos + 1]):
                        next_stack = self.push(next_stack, pos + 1)
                    self.advance_stack(next_stack, stacks_new)
            else:
                current_stacks.clear()
                current_stacks.push_back(stack)
                # every decoded code point, a 0 from an overlong C0 80 included (llama.cpp counts them)
                for c in range(n_code_points):
                    next_stacks.clear()
                    for j in range(current_stacks.size()):
                        self.accept_chr(current_stacks[j], code_points[c], next_stacks)
                    current_stacks.swap(next_stacks)
                    if current_stacks.empty():
                        break
                for j in range(current_stacks.size()):
                    add_unique(stacks_new, current_stacks[j])
            if stacks_new.size() > self.max_stacks:
                with gil:
                    raise GrammarError(
                        f"grammar state exceeds {self.max_stacks} stacks (max_stacks); "
                        "the grammar is too ambiguous at this point")
        return 0

    cdef int collect_rejects(self, const vector[node_t]& stacks, partial_utf8 state, const vocab_view* vocab,
                             const token_t* ids, int64_t n, vector[grammar_candidate]& rejects,
                             vector[uint32_t]& scratch) except -1 nogil:
        """llama_grammar_apply_impl over ids[0:n]: the candidates it sets to -inf (index = position in ids)."""
        cdef vector[grammar_candidate] candidates
        cdef vector[offset_t] scratch_start
        cdef grammar_candidate tok
        cdef bint allow_eog = False
        # From a complete-character state (n_remain 0, or -1 after an invalid piece)
        # a piece decodes the same whatever the state, so the decode done once per vocabulary serves.
        cdef bint fresh = state.n_remain <= 0
        cdef int64_t i
        cdef token_t token
        cdef size_t k
        for k in range(stacks.size()):
            if stacks[k] == EMPTY_STACK:
                allow_eog = True
                break
        candidates.reserve(n)
        for i in range(n):
            token = ids[i]
            tok.index = i
            tok.id = token
            tok.code_points = NULL
            if vocab.is_eog[token]:
                if not allow_eog:
                    rejects.push_back(tok)
            elif vocab.is_empty[token]:
                rejects.push_back(tok)
            elif fresh:
                tok.code_points = vocab.code_points + vocab.code_point_start[token]
                tok.partial = vocab.end_partial[token]
                candidates.push_back(tok)
            else:
                scratch_start.push_back(<offset_t>scratch.size())
                tok.partial = decode_utf8(vocab.piece_bytes + vocab.piece_start[token],
                                          vocab.piece_start[token + 1] - vocab.piece_start[token],
                                          state, scratch)
                candidates.push_back(tok)
        if not fresh:
            for k in range(candidates.size()):
                candidates[k].code_points = scratch.data() + scratch_start[k]
        self.reject_candidates(stacks, candidates, rejects)
        return 0

    cdef int reject_candidates(self, const vector[node_t]& stacks, const vector[grammar_candidate]& candidates,
                               vector[grammar_candidate]& rejects) except -1 nogil:
        cdef vector[grammar_candidate] current, narrowed
        cdef size_t i
        if candidates.empty():
            return 0
        if stacks.empty():
            with gil:
                raise GrammarError("internal error: no stacks to check candidates against")
        self.reject_candidates_for_stack(stacks[0], candidates, current)
        for i in range(1, stacks.size()):
            narrowed.clear()
            self.reject_candidates_for_stack(stacks[i], current, narrowed)
            current.swap(narrowed)
        rejects.insert(rejects.end(), current.begin(), current.end())
        return 0

    cdef int reject_candidates_for_stack(self, node_t stack, const vector[grammar_candidate]& candidates,
                                         vector[grammar_candidate]& rejects) except -1 nogil:
        cdef const grammar_element* elements = self.rules.elements.data()
        cdef const grammar_element* pos
        cdef const grammar_element* after
        cdef vector[grammar_candidate] next_candidates, next_rejects
        cdef vector[node_t] next_stacks
        cdef grammar_candidate tok
        cdef node_t stack_after
        cdef size_t i
        self.reference_work += candidates.size()
        if self.reference_work + self.work > REFERENCE_WORK_BUDGET:
            with gil:
                raise GrammarError(f"the mask exceeds the reference path's work budget of {REFERENCE_WORK_BUDGET} "
                                   "steps (REFERENCE_WORK_BUDGET); the grammar is too ambiguous here")
        if stack == EMPTY_STACK:
            for i in range(candidates.size()):
                if candidates[i].code_points[0] != 0 or candidates[i].partial.n_remain != 0:
                    rejects.push_back(candidates[i])
            return 0
        pos = &elements[self.nodes[stack].element]
        if is_token_element(pos):
            for i in range(candidates.size()):
                if candidates[i].code_points[0] == 0:
                    # the token's text ended exactly here: reject iff it ended mid-character
                    if candidates[i].partial.n_remain != 0:
                        rejects.push_back(candidates[i])
                elif not match_token(pos, candidates[i].id):
                    rejects.push_back(candidates[i])
            return 0
        next_candidates.reserve(candidates.size())
        for i in range(candidates.size()):
            tok = candidates[i]
            if tok.code_points[0] == 0:
                if tok.partial.n_remain != 0 and not match_partial_char(pos, tok.partial):
                    rejects.push_back(tok)
            elif match_char(pos, tok.code_points[0], &after):
                tok.code_points += 1
                next_candidates.push_back(tok)
            else:
                rejects.push_back(tok)
        if next_candidates.empty():
            return 0
        match_char(pos, 0, &after)
        stack_after = self.nodes[stack].parent
        if not is_end_of_sequence(after):
            stack_after = self.push(stack_after, <position_t>(after - elements))
        self.advance_stack(stack_after, next_stacks)
        self.reject_candidates(next_stacks, next_candidates, next_rejects)
        for i in range(next_rejects.size()):
            tok = next_rejects[i]
            tok.code_points -= 1
            rejects.push_back(tok)
        return 0

    cdef int forced_bytes(self, const vector[node_t]& start, partial_utf8 partial, size_t max_bytes,
                          vector[uint8_t]& out) except -1 nogil:
        """The bytes every continuation of the state (start, partial) begins with (jump-forward), into out.

        Inside a character: its remaining continuation bytes, as far as every code point the stacks
        can still complete it to agrees on them (continuation bytes are base-64 digits, so the common
        prefix of the smallest and largest candidate is everyone's). Then whole characters while the
        union of the stacks' classes is one code point, advancing the stacks by it (accept_chr). It
        stops at a state that may end (an empty stack), at a token terminal, at code point 0 (no piece
        can spell it: decode_utf8 stops at NUL), past U+10FFFF, and after max_bytes."""
        cdef const grammar_element* elements = self.rules.elements.data()
        cdef vector[node_t] stacks = start
        cdef vector[node_t] next_stacks
        cdef vector[pair[uint32_t, uint32_t]] intervals, scratch
        cdef const grammar_element* pos
        cdef uint32_t low = 0, high = 0, smallest, largest, cp
        cdef uint8_t encoded[4]
        cdef int n_remain = partial.n_remain
        cdef int n_bytes, k
        cdef size_t i, j
        cdef bint whole
        while out.size() < max_bytes:
            intervals.clear()
            for i in range(stacks.size()):
                if stacks[i] == EMPTY_STACK:
                    return 0            # the grammar may end here: nothing is forced
                pos = &elements[self.nodes[stacks[i]].element]
                if is_token_element(pos):
                    return 0            # a token terminal takes a token by id, not text
                class_intervals(pos, intervals, scratch)
            if n_remain > 0:
                partial.n_remain = n_remain
                if not partial_char_range(partial, &low, &high):
                    return 0
            else:
                low = 0
                high = MAX_CODE_POINT
            smallest = MAX_CODE_POINT
            largest = 0
            whole = False
            for j in range(intervals.size()):
                if intervals[j].second < low or intervals[j].first > high:
                    continue
                whole = True
                smallest = min(smallest, max(intervals[j].first, low))
                largest = max(largest, min(intervals[j].second, high))
            if not whole:
                return 0                # no stack can go on (a dead state)
            if n_remain > 0:
                # the continuation bytes the candidates share, most significant first
                for k in range(n_remain - 1, -1, -1):
                    if (smallest >> (6 * k)) & 0x3F != (largest >> (6 * k)) & 0x3F:
                        return 0
                    if out.size() >= max_bytes:
                        return 0
                    out.push_back(<uint8_t>(0x80 | ((smallest >> (6 * k)) & 0x3F)))
                    n_remain -= 1
                    partial.value = (partial.value << 6) | ((smallest >> (6 * k)) & 0x3F)
                cp = partial.value
                n_remain = 0
            else:
                if smallest != largest or smallest == 0 or smallest > 0x10FFFF:
                    return 0
                cp = smallest
                if cp < 0x80:
                    encoded[0] = <uint8_t>cp
                    n_bytes = 1
                elif cp < 0x800:
                    encoded[0] = <uint8_t>(0xC0 | (cp >> 6))
                    encoded[1] = <uint8_t>(0x80 | (cp & 0x3F))
                    n_bytes = 2
                elif cp < 0x10000:
                    encoded[0] = <uint8_t>(0xE0 | (cp >> 12))
                    encoded[1] = <uint8_t>(0x80 | ((cp >> 6) & 0x3F))
                    encoded[2] = <uint8_t>(0x80 | (cp & 0x3F))
                    n_bytes = 3
                else:
                    encoded[0] = <uint8_t>(0xF0 | (cp >> 18))
                    encoded[1] = <uint8_t>(0x80 | ((cp >> 12) & 0x3F))
                    encoded[2] = <uint8_t>(0x80 | ((cp >> 6) & 0x3F))
                    encoded[3] = <uint8_t>(0x80 | (cp & 0x3F))
                    n_bytes = 4
                if out.size() + n_bytes > max_bytes:
                    return 0
                for k in range(n_bytes):
                    out.push_back(encoded[k])
            next_stacks.clear()
            for i in range(stacks.size()):
                self.accept_chr(stacks[i], cp, next_stacks)
            stacks.swap(next_stacks)
            if stacks.size() > self.max_stacks:
                with gil:
                    raise GrammarError(
                        f"grammar state exceeds {self.max_stacks} stacks (max_stacks); "
                        "the grammar is too ambiguous at this point")
            if stacks.empty():
                return 0
        return 0
