# Included by _grammar.pyx (one extension, so the hot calls stay within one C translation unit).
# Interned stack sets and what the fast path knows about each: its transitions by a code point (memoized
# by match pattern), its set_summary (uniform successor and class, runs, viable intervals, partial mode),
# and the per-element class summaries they are computed from. Owns set ids.
# Declarations: _stacksets.pxd (included by _grammar.pxd).


cdef inline int32_t split_parts(uint64_t* part_lo, uint64_t* part_hi, int32_t n_parts, uint64_t lo,
                                uint64_t hi) noexcept nogil:
    """Partition refinement on two bit words per part: split every part that the class (lo, hi) cuts into the code
    points it takes and the others (those go to new parts at the end). Returns the new number of parts."""
    cdef int32_t p, n_before = n_parts
    cdef uint64_t in_lo, in_hi
    for p in range(n_before):
        in_lo = part_lo[p] & lo
        in_hi = part_hi[p] & hi
        if (in_lo | in_hi) and ((part_lo[p] & ~lo) | (part_hi[p] & ~hi)):
            part_lo[n_parts] = part_lo[p] & ~lo
            part_hi[n_parts] = part_hi[p] & ~hi
            n_parts += 1
            part_lo[p] = in_lo
            part_hi[p] = in_hi
    return n_parts


cdef class StackSets:
    """Interned stack sets (set ids), their transitions and one set_summary each."""

    def __cinit__(self, StackPool pool, int32_t max_token_depth):
        self.pool = pool
        self.max_token_depth = max_token_depth
        self.set_start.push_back(0)
        self.element_ascii.assign_zeros(2 * pool.rules.elements.size())
        self.element_flags.assign_zeros(pool.rules.elements.size())
        self.element_long.assign_zeros(pool.rules.elements.size())

    cdef void reserve_headroom(self) noexcept nogil:
        self.transitions.reserve(self.transitions.size() * 3 // 2 + 1024)
        self.pattern_transitions.reserve(self.pattern_transitions.size() * 3 // 2 + 1024)
        self.set_by_hash.reserve(self.set_by_hash.size() * 3 // 2 + 1024)

    cdef int32_t intern_set(self, vector[node_t]& nodes) except -2 nogil:
        """The id of a set of stacks (sorted and deduplicated in place)."""
        cdef int32_t set_id, candidate
        cdef uint64_t hash_value = 0x84222325CBF29CE4ULL
        cdef size_t i, n
        cdef int64_t first
        cdef bint same
        sort(nodes.begin(), nodes.end())
        nodes.erase(unique(nodes.begin(), nodes.end()), nodes.end())
        n = nodes.size()
        for i in range(n):
            hash_value = (hash_value ^ <uint32_t>nodes[i]) * 0x100000001B3ULL
        hash_value ^= hash_value >> 29
        it = self.set_by_hash.find(hash_value)
        if it != self.set_by_hash.end():
            candidate = deref(it).second
            while candidate >= 0:
                first = self.set_start[candidate]
                if <size_t>(self.set_start[candidate + 1] - first) == n:
                    same = True
                    for i in range(n):
                        if self.set_nodes[first + i] != nodes[i]:
                            same = False
                            break
                    if same:
                        return candidate
                candidate = self.set_hash_next[candidate]
        if self.set_start.size() > MAX_SETS:
            with gil:
                raise GrammarError(f"grammar state exceeds {MAX_SETS} stack sets")
        set_id = <int32_t>(self.set_start.size() - 1)
        self.set_nodes.insert(self.set_nodes.end(), nodes.begin(), nodes.end())
        self.set_start.push_back(<int64_t>self.set_nodes.size())
        it = self.set_by_hash.find(hash_value)
        self.set_hash_next.push_back(deref(it).second if it != self.set_by_hash.end() else -1)
        self.set_by_hash[hash_value] = set_id
        cdef set_summary summary
        summary.class_ascii[0] = 0
        summary.class_ascii[1] = 0
        summary.viable_start = VIABLE_UNKNOWN
        summary.viable_count = 0
        summary.successor = NO_SET
        summary.run_length = RUN_UNKNOWN
        summary.run_end = NO_SET
        summary.class_above = 0
        summary.flags = 0
        summary.partial_mode = PARTIAL_UNKNOWN
        summary.total_ascii[0] = 0
        summary.total_ascii[1] = 0
        summary.total_flags = 0
        # sorted ids: SEGMENT_BASE (1) comes first or right after EMPTY_STACK (0)
        if (nodes.size() > 0 and nodes[0] == SEGMENT_BASE) or (nodes.size() > 1 and nodes[1] == SEGMENT_BASE):
            summary.flags = SET_HAS_BASE
        self.summaries.push_back(summary)
        return set_id

    cdef int32_t step_set(self, int32_t set_id, uint32_t cp) except -2 nogil:
        """The set of stacks after one code point (llama_grammar_accept over the set), or -1.

        The result depends only on which of the set's stacks match the code point,
        so it is memoized by that match pattern as well as by the code point.
        """
        cdef const grammar_element* elements = self.pool.rules.elements.data()
        cdef const grammar_element* after
        cdef const grammar_element* top
        cdef node_t stack, next_stack
        cdef int64_t k, first = self.set_start[set_id], last = self.set_start[set_id + 1]
        cdef uint64_t matches = 0, key
        cdef int32_t result
        cdef bint by_pattern = last - first <= 63
        if by_pattern:
            for k in range(first, last):
                stack = self.set_nodes[k]
                if is_bottom(stack):
                    continue
                top = &elements[self.pool.nodes[stack].element]
                if not is_token_element(top) and self.class_takes(self.pool.nodes[stack].element, cp, &after):
                    matches |= (<uint64_t>1) << (k - first)
            if matches == 0:
                return NO_SET
            key = (<uint64_t><uint32_t>set_id << 32) ^ (matches * 0x9E3779B97F4A7C15ULL)
            it = self.pattern_transitions.find(key)
            if it != self.pattern_transitions.end() and deref(it).second.first == matches:
                return deref(it).second.second
        self.pool.charge(last - first)
        self.step_stacks.clear()  # scratch of the context: step_set never runs inside itself
        for k in range(first, last):
            stack = self.set_nodes[k]
            if is_bottom(stack):
                continue
            top = &elements[self.pool.nodes[stack].element]
            if is_token_element(top):
                continue
            if self.class_takes(self.pool.nodes[stack].element, cp, &after):
                next_stack = self.pool.nodes[stack].parent
                if not is_end_of_sequence(after):
                    next_stack = self.pool.push(next_stack, <position_t>(after - elements))
                self.pool.advance_stack(next_stack, self.step_stacks)
        result = NO_SET if self.step_stacks.empty() else self.intern_set(self.step_stacks)
        if by_pattern:
            self.pattern_transitions[key] = pair[uint64_t, int32_t](matches, result)
        return result

    cdef int32_t transition(self, int32_t set_id, uint32_t cp) except -2 nogil:
        cdef uint64_t key = (<uint64_t><uint32_t>set_id << 32) | cp
        cdef int32_t result
        it = self.transitions.find(key)
        if it != self.transitions.end():
            return deref(it).second
        result = self.step_set(set_id, cp)
        self.transitions[key] = result
        return result

    cdef int64_t index_class(self, position_t pos) except -2 nogil:
        """The class at pos's entry in element_long (-1 a short class, else 1 + where its intervals start in
        class_bounds), indexed on first use: a class of more than LONG_CLASS alternatives (a Unicode class such as
        Python's \\w has hundreds) gets the code points match_char takes as sorted disjoint intervals in
        class_bounds, so class_takes decides it by a binary search rather than a scan of every alternative."""
        cdef const grammar_element* elements = self.pool.rules.elements.data()
        cdef const grammar_element* at
        cdef vector[pair[uint32_t, uint32_t]] intervals, scratch
        cdef size_t j, start, top
        if self.element_long[pos] != 0:
            return self.element_long[pos]
        if class_alternatives(&elements[pos], &at) <= LONG_CLASS:
            self.element_long[pos] = -1
            return -1
        class_intervals(&elements[pos], intervals, scratch)
        sort(intervals.begin(), intervals.end())
        start = self.class_bounds.size()
        self.class_bounds.push_back(0)
        self.class_bounds.push_back(<uint32_t>(at - elements))
        for j in range(intervals.size()):
            top = self.class_bounds.size() - 1
            if top > start + 1 and (
                    self.class_bounds[top] == MAX_CODE_POINT or intervals[j].first <= self.class_bounds[top] + 1):
                if intervals[j].second > self.class_bounds[top]:
                    self.class_bounds[top] = intervals[j].second
                continue
            self.class_bounds.push_back(intervals[j].first)
            self.class_bounds.push_back(intervals[j].second)
            self.class_bounds[start] += 1
        self.element_long[pos] = <int64_t>start + 1
        return self.element_long[pos]

    cdef int class_takes(self, position_t pos, uint32_t cp, const grammar_element** after) except -1 nogil:
        """match_char at element position pos: the same answer and *after, through the class's intervals when
        it is long (index_class)."""
        cdef const grammar_element* elements = self.pool.rules.elements.data()
        cdef int64_t at = self.index_class(pos)
        cdef int64_t j
        cdef const uint32_t* bounds
        if at < 0:
            return match_char(&elements[pos], cp, after)
        bounds = self.class_bounds.data() + at - 1
        after[0] = &elements[bounds[1]]
        j = first_interval_reaching(bounds + 2, 0, <int64_t>bounds[0], cp)
        return j < <int64_t>bounds[0] and bounds[2 + 2 * j] <= cp

    cdef int element_info(self, position_t pos) except -1 nogil:
        """Summarize the character class at pos once: its ASCII members, and whether membership is
        the same for every code point >= 0x80 (and which) and it takes every partial character."""
        cdef const grammar_element* elements = self.pool.rules.elements.data()
        cdef uint64_t lo = 0, hi = 0
        cdef uint8_t flags = ELEMENT_KNOWN
        cdef bint member
        if self.element_flags[pos] & ELEMENT_KNOWN:
            return 0
        class_ascii_bits(&elements[pos], &lo, &hi)
        if class_constant_from(&elements[pos], 0x80, &member):
            flags |= ELEMENT_CONSTANT_ABOVE
            if member:
                flags |= ELEMENT_MEMBER_ABOVE
        if class_accepts_all_partials(&elements[pos]):
            flags |= ELEMENT_ALL_PARTIALS
        self.element_ascii[2 * pos] = lo
        self.element_ascii[2 * pos + 1] = hi
        self.element_flags[pos] = flags
        return 0

    cdef int compute_loop(self, int32_t set_id) except -1 nogil:
        """The set's uniform successor and the code points that lead to it (its class).

        Most code points a set can take lead to one and the same set: back to itself
        inside a `*` loop, or one step along a chain inside a bounded `{m,n}`. Code
        points are grouped by which of the set's stacks they match (the step depends
        only on that), and the group most ASCII code points fall in gives the
        successor; its code points are the class. The set is stepped once for that
        group (and once for the code points >= 0x80 when they all behave alike), so
        a new set costs no steps it would not take anyway.
        """
        cdef position_t tops[64]
        cdef uint64_t part_lo[128]
        cdef uint64_t part_hi[128]
        cdef int32_t n_tops = 0, n_parts = 0, best = -1, successor = -1, p, j, count, best_count = 0
        cdef int32_t last_cp, best_last = 0
        cdef uint64_t ascii_lo = 0, ascii_hi = 0
        cdef bint constant, member_above = False
        cdef int64_t k
        cdef node_t stack
        cdef position_t top
        cdef bint known
        self.summaries[set_id].flags |= SET_CLASS_KNOWN
        # (what the tops' classes say of unfinished characters and code points >= 0x80: summarize_tops, once;
        # it also reads each top's ASCII bits, which the grouping below needs)
        if self.partial_mode_of(set_id) == PARTIAL_ALL:
            self.summaries[set_id].flags |= SET_ALL_PARTIALS
        constant = self.constant_above(set_id)
        # The tops, one per distinct (ASCII bits, member above 0x80): the grouping reads nothing else of them, so
        # many stacks under one literal (a class's \uXXXX spellings all start with a backslash) count once.
        for k in range(self.set_start[set_id], self.set_start[set_id + 1]):
            stack = self.set_nodes[k]
            if is_bottom(stack) or is_token_element(&self.pool.rules.elements[self.pool.nodes[stack].element]):
                continue
            top = self.pool.nodes[stack].element
            known = False
            for j in range(n_tops):
                if self.element_ascii[2 * tops[j]] == self.element_ascii[2 * top] and \
                        self.element_ascii[2 * tops[j] + 1] == self.element_ascii[2 * top + 1] and \
                        (self.element_flags[tops[j]] & ELEMENT_MEMBER_ABOVE) == (self.element_flags[top] & ELEMENT_MEMBER_ABOVE):
                    known = True
                    break
            if known:
                continue
            if n_tops == 64:
                return 0  # too many distinct tops to group by: no class, the walk goes node by node
            tops[n_tops] = top
            n_tops += 1
        # The ASCII code points grouped by the tops that match them: the union of the tops' classes split by
        # each class in turn (partition refinement on bit words), each part one group.
        for j in range(n_tops):
            if self.element_flags[tops[j]] & ELEMENT_MEMBER_ABOVE:
                member_above = True
            ascii_lo |= self.element_ascii[2 * tops[j]]
            ascii_hi |= self.element_ascii[2 * tops[j] + 1]
        if ascii_lo | ascii_hi:
            part_lo[0] = ascii_lo
            part_hi[0] = ascii_hi
            n_parts = 1
        for j in range(n_tops):
            n_parts = split_parts(part_lo, part_hi, n_parts, self.element_ascii[2 * tops[j]],
                                  self.element_ascii[2 * tops[j] + 1])
        # The largest group; of equal ones, the one whose last code point comes first (the group a scan by
        # code point would have seen reach that size first).
        for p in range(n_parts):
            count = popcount64(part_lo[p]) + popcount64(part_hi[p])
            last_cp = 127 - clz64(part_hi[p]) if part_hi[p] else 63 - clz64(part_lo[p])
            if best < 0 or count > best_count or (count == best_count and last_cp < best_last):
                best = p
                best_count = count
                best_last = last_cp
        ascii_lo = 0
        ascii_hi = 0
        if best >= 0:
            successor = self.transition(set_id, <uint32_t>(ctz64(part_lo[best]) if part_lo[best] else
                                                           64 + ctz64(part_hi[best])))
            if successor >= 0:
                ascii_lo = part_lo[best]
                ascii_hi = part_hi[best]
        if successor < 0 and constant and member_above:
            successor = self.transition(set_id, 0x80)
        if successor < 0:
            return 0
        self.summaries[set_id].successor = successor
        self.summaries[set_id].class_ascii[0] = ascii_lo
        self.summaries[set_id].class_ascii[1] = ascii_hi
        if constant and member_above:
            # every code point >= 0x80 matches the same stacks, so 0x80 stands for them all
            if self.transition(set_id, 0x80) == successor:
                self.summaries[set_id].flags |= SET_CLASS_NON_ASCII
        elif not constant:
            self.find_class_above(set_id, successor)
        return 0

    cdef int find_class_above(self, int32_t set_id, int32_t successor) except -1 nogil:
        """SET_CLASS_ABOVE: when one class on top (one element position) takes code points >= 0x80 and the others
        take none, each of those code points matches the same stacks (the ones under that class), so one of them
        stands for them all: if it leads to the successor, they all do, and a subtree whose code points >= 0x80 lie
        in one span the class takes (class_covers) stays in the class there. Strict mode's string classes (the
        surrogates left out, Unicode classes such as Python's \\w) are never constant above 0x80, so without this
        a loop over them took no non-ASCII subtree whole."""
        cdef const grammar_element* elements = self.pool.rules.elements.data()
        cdef int64_t k, at, j
        cdef int64_t above = -1
        cdef node_t stack
        cdef position_t top
        cdef uint8_t flags
        cdef uint32_t rep = 0x80
        cdef bint found = False
        cdef const uint32_t* bounds
        cdef vector[pair[uint32_t, uint32_t]] intervals, scratch
        for k in range(self.set_start[set_id], self.set_start[set_id + 1]):
            stack = self.set_nodes[k]
            if is_bottom(stack) or is_token_element(&elements[self.pool.nodes[stack].element]):
                continue
            top = self.pool.nodes[stack].element
            self.element_info(top)
            flags = self.element_flags[top]
            if (flags & ELEMENT_CONSTANT_ABOVE) and not (flags & ELEMENT_MEMBER_ABOVE):
                continue   # takes no code point >= 0x80
            if above < 0:
                above = top
            elif above != top:
                return 0
        if above < 0:
            return 0
        # the least code point >= 0x80 the class takes
        at = self.index_class(<position_t>above)
        if at > 0:
            bounds = self.class_bounds.data() + at - 1
            j = first_interval_reaching(bounds + 2, 0, <int64_t>bounds[0], 0x80)
            if j >= <int64_t>bounds[0]:
                return 0
            rep = bounds[2 + 2 * j] if bounds[2 + 2 * j] > 0x80 else 0x80
        else:
            class_intervals(&elements[above], intervals, scratch)
            for j in range(<int64_t>intervals.size()):
                if intervals[j].second >= 0x80 and (not found or intervals[j].first < rep):
                    rep = intervals[j].first if intervals[j].first > 0x80 else 0x80
                    found = True
            if not found:
                return 0
        if self.transition(set_id, rep) == successor:
            self.summaries[set_id].flags |= SET_CLASS_ABOVE
            self.summaries[set_id].class_above = <position_t>above
        return 0

    cdef bint class_covers(self, position_t pos, uint32_t low, uint32_t high) except -1 nogil:
        """Whether the class at pos takes every code point in [low, high]. A long class answers from its intervals
        (index_class); a short one by its alternatives, where a positive class must hold the span in one of them
        (False when only several together do: the walk then goes node by node, as before)."""
        cdef const grammar_element* elements = self.pool.rules.elements.data()
        cdef const grammar_element* at_pos
        cdef int64_t at = self.index_class(pos)
        cdef int64_t j
        cdef const uint32_t* bounds
        cdef uint32_t first, last
        cdef bint positive
        if at > 0:
            bounds = self.class_bounds.data() + at - 1
            j = first_interval_reaching(bounds + 2, 0, <int64_t>bounds[0], low)
            return j < <int64_t>bounds[0] and bounds[2 + 2 * j] <= low and high <= bounds[3 + 2 * j]
        positive = is_positive_class(&elements[pos])
        at_pos = &elements[pos]
        while True:
            at_pos = class_next_range(at_pos, &first, &last)
            if positive:
                if first <= low and high <= last:
                    return True
            elif first <= high and low <= last:
                return False   # an excluded range meets the span
            if at_pos.type != LLAMA_GRETYPE_CHAR_ALT:
                break
        return not positive

    cdef int summarize_tops(self, int32_t set_id) except -1 nogil:
        """Read the classes on top of the set's stacks once, for what both partial_mode_of and
        constant_above answer: partial_mode (PARTIAL_ALL when one class takes every unfinished character
        that can still complete, PARTIAL_NONE when every class takes no code point >= 0x80, else
        PARTIAL_MIXED) and SET_ABOVE_CONSTANT (every class takes all code points >= 0x80 alike)."""
        cdef const grammar_element* elements = self.pool.rules.elements.data()
        cdef node_t stack
        cdef int64_t k
        cdef uint8_t mode = PARTIAL_NONE, flags, above = SET_ABOVE_KNOWN | SET_ABOVE_CONSTANT
        for k in range(self.set_start[set_id], self.set_start[set_id + 1]):
            stack = self.set_nodes[k]
            if is_bottom(stack) or is_token_element(&elements[self.pool.nodes[stack].element]):
                continue
            self.element_info(self.pool.nodes[stack].element)
            flags = self.element_flags[self.pool.nodes[stack].element]
            if flags & ELEMENT_ALL_PARTIALS:
                mode = PARTIAL_ALL
            elif mode != PARTIAL_ALL and not ((flags & ELEMENT_CONSTANT_ABOVE) and not (flags & ELEMENT_MEMBER_ABOVE)):
                mode = PARTIAL_MIXED
            if not (flags & ELEMENT_CONSTANT_ABOVE):
                above = SET_ABOVE_KNOWN
        self.summaries[set_id].partial_mode = mode
        self.summaries[set_id].flags |= above
        return 0

    cdef uint8_t partial_mode_of(self, int32_t set_id) except 0 nogil:
        """PARTIAL_ALL, PARTIAL_NONE or PARTIAL_MIXED: whether the set takes every unfinished character
        that can still complete, none, or some (ask each stack). Most sets take all (a negated class of
        ASCII exclusions) or none (ASCII classes): decided once from the classes on top."""
        if self.summaries[set_id].partial_mode == PARTIAL_UNKNOWN:
            self.summarize_tops(set_id)
        return self.summaries[set_id].partial_mode

    cdef bint set_accepts_partial(self, int32_t set_id, partial_utf8 partial) except -1 nogil:
        """Whether some stack of the set takes an unfinished character (match_partial_char)."""
        cdef const grammar_element* elements = self.pool.rules.elements.data()
        cdef const grammar_element* top
        cdef node_t stack
        cdef position_t pos
        cdef int64_t k
        cdef uint8_t mode, taken
        cdef uint64_t key
        cdef flat_map[uint64_t, uint8_t].iterator it
        if partial.n_remain < 0 or (partial.n_remain == 1 and partial.value < 2):
            return False   # invalid, or an overlong 2-byte lead: match_partial_char never holds
        mode = self.partial_mode_of(set_id)
        if mode == PARTIAL_ALL:
            return True
        if mode == PARTIAL_NONE:
            return False
        for k in range(self.set_start[set_id], self.set_start[set_id + 1]):
            stack = self.set_nodes[k]
            if is_bottom(stack):
                continue
            pos = self.pool.nodes[stack].element
            top = &elements[pos]
            if is_token_element(top):
                continue
            # A long class (index_class: a Unicode class of hundreds of ranges, as strict mode's patterns write)
            # is scanned range by range by match_partial_char, for each of the hundreds of unfinished characters
            # that byte tokens end in, in every new set: its answers are remembered per class position.
            if self.index_class(pos) > 0:
                key = (<uint64_t>pos << 32) | (<uint64_t>(partial.n_remain & 3) << 24) | (partial.value & 0xFFFFFF)
                it = self.partial_memo.find(key)
                if it != self.partial_memo.end():
                    taken = deref(it).second
                else:
                    taken = match_partial_char(top, partial)
                    self.partial_memo[key] = taken
                if taken:
                    return True
            elif match_partial_char(top, partial):
                return True
        return False

    cdef bint constant_above(self, int32_t set_id) except -1 nogil:
        """Whether every character class on top of the set's stacks takes all code points >= 0x80 alike (all
        of them, or none): then every such code point matches the same stacks and leads to the same set."""
        if not (self.summaries[set_id].flags & SET_ABOVE_KNOWN):
            self.summarize_tops(set_id)
        return (self.summaries[set_id].flags & SET_ABOVE_CONSTANT) != 0

    cdef bint chain_accepts(self, int32_t set_id, uint64_t ascii_lo, uint64_t ascii_hi, uint8_t flags,
                            int32_t depth, const uint32_t* span) except -1 nogil:
        """Whether every token of a subtree with this summary is accepted from the set: following the
        successors for as many code points as the deepest token takes, every code point stays in the
        class of the set it meets, and every partial character it ends in is one that set takes. span: the
        least and greatest code point >= 0x80 of the subtree (NULL: not known), for a set whose class takes
        only some of them (SET_CLASS_ABOVE)."""
        cdef int32_t d = 0, successor
        cdef bint stepwise
        if flags & SUBTREE_OVERLONG_END:
            return False
        while True:
            if not (self.summaries[set_id].flags & SET_CLASS_KNOWN):
                self.compute_loop(set_id)
            if (flags & SUBTREE_PARTIAL_END) and not (self.summaries[set_id].flags & SET_ALL_PARTIALS):
                return False
            if d >= depth:
                return True
            successor = self.summaries[set_id].successor
            if successor < 0 or (ascii_lo & ~self.summaries[set_id].class_ascii[0]) != 0 \
                    or (ascii_hi & ~self.summaries[set_id].class_ascii[1]) != 0:
                return False
            stepwise = False
            if (flags & SUBTREE_NON_ASCII) and not (self.summaries[set_id].flags & SET_CLASS_NON_ASCII):
                if span == NULL or not (self.summaries[set_id].flags & SET_CLASS_ABOVE) or span[0] > span[1] \
                        or not self.class_covers(self.summaries[set_id].class_above, span[0], span[1]):
                    return False
                # (the sets of a run share their ASCII class, not this class's position: stepped one by one)
                stepwise = True
            if successor == set_id:
                return True  # a loop: every deeper code point meets this same set
            if stepwise:
                d += 1
                set_id = successor
                continue
            # The next sets along the chain (a bounded repetition) often have this very class: the checks
            # just made hold for all of them, so jump past the run instead of stepping set by set.
            if self.summaries[set_id].run_length == RUN_UNKNOWN:
                self.compute_run(set_id)
            if d + self.summaries[set_id].run_length > depth:
                return True
            d += self.summaries[set_id].run_length
            set_id = self.summaries[set_id].run_end
            if set_id == NO_SET:
                return False

    cdef bint same_class(self, int32_t a, int32_t b) noexcept nogil:
        return self.summaries[a].class_ascii[0] == self.summaries[b].class_ascii[0] \
            and self.summaries[a].class_ascii[1] == self.summaries[b].class_ascii[1] \
            and (self.summaries[a].flags & (SET_CLASS_NON_ASCII | SET_ALL_PARTIALS)) \
            == (self.summaries[b].flags & (SET_CLASS_NON_ASCII | SET_ALL_PARTIALS))

    cdef int compute_run(self, int32_t set_id) except -1 nogil:
        """How many sets in a row, following successors from set_id, have set_id's class and take the same
        partial characters (run_length, RUN_UNBOUNDED when the run ends in a loop), and the set after
        them (run_end, NO_SET if none). Explored no deeper than the longest token needs. SET_RUN_IMPURE
        marks a set whose run (itself included) has a set with SEGMENT_BASE or a token terminal on top."""
        cdef int32_t s = set_id, successor, c
        cdef int64_t i, length, k
        cdef bint impure
        cdef int32_t limit = self.max_token_depth + 2
        self.run_chain.clear()
        while True:
            if not (self.summaries[s].flags & SET_CLASS_KNOWN):
                self.compute_loop(s)
            if self.summaries[s].run_length != RUN_UNKNOWN:
                break
            self.run_chain.push_back(s)
            successor = self.summaries[s].successor
            if successor == NO_SET or successor == s or <int32_t>self.run_chain.size() >= limit:
                break
            if not (self.summaries[successor].flags & SET_CLASS_KNOWN):
                self.compute_loop(successor)
            if not self.same_class(s, successor):
                break
            s = successor
        for i in range(<int64_t>self.run_chain.size() - 1, -1, -1):
            c = self.run_chain[i]
            successor = self.summaries[c].successor
            impure = (self.summaries[c].flags & SET_HAS_BASE) != 0
            k = self.set_start[c]
            while not impure and k < self.set_start[c + 1]:
                impure = not is_bottom(self.set_nodes[k]) and \
                    is_token_element(&self.pool.rules.elements[self.pool.nodes[self.set_nodes[k]].element])
                k += 1
            if successor == c:
                self.summaries[c].run_length = RUN_UNBOUNDED
                self.summaries[c].run_end = NO_SET
            elif successor == NO_SET:
                self.summaries[c].run_length = 1
                self.summaries[c].run_end = NO_SET
            elif self.summaries[successor].run_length != RUN_UNKNOWN and self.same_class(c, successor):
                length = 1 + <int64_t>self.summaries[successor].run_length
                self.summaries[c].run_length = <int32_t>min(length, <int64_t>RUN_UNBOUNDED)
                self.summaries[c].run_end = self.summaries[successor].run_end
                impure = impure or (self.summaries[successor].flags & SET_RUN_IMPURE) != 0
            else:
                self.summaries[c].run_length = 1
                self.summaries[c].run_end = successor
            if impure:
                self.summaries[c].flags |= SET_RUN_IMPURE
        return 0

    cdef int element_text_info(self, position_t pos) except -1 nogil:
        """Whether the class at pos takes every text code point >= 0x80 alike (ELEMENT_CONSTANT_TEXT) and takes
        them (ELEMENT_MEMBER_TEXT): as element_info's ABOVE bits, but over [0x80, 0xD7FF] and [0xE000, 0x10FFFF]
        only, so a string's class that leaves out the surrogates (as strict mode's do) still counts as taking them
        all."""
        cdef const grammar_element* elements = self.pool.rules.elements.data()
        cdef vector[pair[uint32_t, uint32_t]] intervals, scratch
        cdef uint32_t cursor_low = 0x80, cursor_high = TEXT_HIGH_START
        cdef bint touched = False
        cdef size_t j
        cdef uint8_t flags = ELEMENT_TEXT_KNOWN
        if self.element_flags[pos] & ELEMENT_TEXT_KNOWN:
            return 0
        class_intervals(&elements[pos], intervals, scratch)
        sort(intervals.begin(), intervals.end())
        # sweep the sorted intervals: how far from its start each text range is covered without a gap
        for j in range(intervals.size()):
            if intervals[j].second < 0x80 or (TEXT_LOW_END < intervals[j].first and intervals[j].second < TEXT_HIGH_START) \
                    or intervals[j].first > TEXT_MAX:
                continue
            touched = True
            if cursor_low <= TEXT_LOW_END and intervals[j].first <= cursor_low and intervals[j].second >= cursor_low:
                cursor_low = TEXT_LOW_END + 1 if intervals[j].second >= TEXT_LOW_END else intervals[j].second + 1
            if cursor_high <= TEXT_MAX and intervals[j].first <= cursor_high and intervals[j].second >= cursor_high:
                cursor_high = TEXT_MAX + 1 if intervals[j].second >= TEXT_MAX else intervals[j].second + 1
        if cursor_low > TEXT_LOW_END and cursor_high > TEXT_MAX:
            flags |= ELEMENT_CONSTANT_TEXT | ELEMENT_MEMBER_TEXT
        elif not touched:
            flags |= ELEMENT_CONSTANT_TEXT
        self.element_flags[pos] |= flags
        return 0

    cdef int compute_family(self, int32_t set_id) except -1 nogil:
        """The set's family and its class (total_ascii, TOTAL_TEXT): sets closed under the class's code points,
        each taking every one of them, so every string of them is viable from any of them.

        A search pattern's automaton (`.*console.*` inside a string) changes set on nearly every code point, so
        neither a loop nor a run takes a subtree whole there; yet every one of its states takes every character
        but the quote and the backslash. The class starts as what the set takes (the ASCII code points its tops
        take; the text code points >= 0x80 when the tops take every one of them between them), and the
        family is explored breadth first: each member is stepped once per group of the class's code points that
        match the same tops (the step depends only on which), so every successor on the class is a member. A
        member that does not take the whole class (the set after the closing quote, or after a backslash), or
        that holds SEGMENT_BASE (a segment walk must record where paths pop out: the continuation walks from the
        real stack below find the family instead), drops from the class the group that led to it, and the
        exploration starts again (transitions are memoized). The class's text code points >= 0x80 are
        all of them or none (text_steps). No class left, more than MAX_FAMILY members, or more than
        MAX_FAMILY_ROUNDS rounds: no family (an empty class). The members get the same class: it is closed for
        each of them."""
        cdef uint64_t part_lo[128]
        cdef uint64_t part_hi[128]
        cdef uint64_t reach_lo[MAX_FAMILY]
        cdef uint64_t reach_hi[MAX_FAMILY]
        cdef bint reach_text[MAX_FAMILY]
        cdef uint64_t class_lo = ~(<uint64_t>0), class_hi = ~(<uint64_t>0), union_lo, union_hi
        cdef bint text = True, partials, text_covered, found, restart
        cdef int32_t n_parts, p, x, y, j, round_
        cdef size_t i, t
        for round_ in range(MAX_FAMILY_ROUNDS):
            self.family.clear()
            self.family.push_back(set_id)
            partials = True
            restart = False
            i = 0
            while i < self.family.size() and not restart:
                x = self.family[i]
                self.collect_tops(x)
                union_lo = 0
                union_hi = 0
                for t in range(self.family_tops.size()):
                    union_lo |= self.element_ascii[2 * self.family_tops[t]]
                    union_hi |= self.element_ascii[2 * self.family_tops[t] + 1]
                text_covered = text and self.text_steps()
                if i == 0:
                    # the set itself: the class is at most what it takes
                    if self.summaries[x].flags & SET_HAS_BASE:
                        return self.no_family(set_id)
                    class_lo &= union_lo
                    class_hi &= union_hi
                    text = text_covered
                elif (self.summaries[x].flags & SET_HAS_BASE) or (class_lo & ~union_lo) or (class_hi & ~union_hi) \
                        or (text and not text_covered):
                    # a member short of the class: the code points that led to it leave the class
                    class_lo &= ~reach_lo[i]
                    class_hi &= ~reach_hi[i]
                    if reach_text[i]:
                        text = False
                    restart = True
                    break
                if not (class_lo | class_hi) and not text:
                    return self.no_family(set_id)
                if partials and self.partial_mode_of(x) != PARTIAL_ALL:
                    partials = False
                # the class's ASCII code points grouped by the tops that take them (partition refinement, as in
                # compute_loop), each group stepped once
                n_parts = 0
                if class_lo | class_hi:
                    part_lo[0] = class_lo
                    part_hi[0] = class_hi
                    n_parts = 1
                for t in range(self.family_tops.size()):
                    n_parts = split_parts(part_lo, part_hi, n_parts, self.element_ascii[2 * self.family_tops[t]],
                                          self.element_ascii[2 * self.family_tops[t] + 1])
                for p in range(n_parts + (<int32_t>self.text_reps.size() if text else 0)):
                    if p < n_parts:
                        y = self.transition(x, <uint32_t>(ctz64(part_lo[p]) if part_lo[p] else 64 + ctz64(part_hi[p])))
                    else:
                        # the text code points >= 0x80 that match the same tops as this one (text_steps)
                        y = self.transition(x, self.text_reps[p - n_parts])
                    if y < 0:
                        # (a code point a top takes leaves no stack: the group leaves the class)
                        if p < n_parts:
                            class_lo &= ~part_lo[p]
                            class_hi &= ~part_hi[p]
                        else:
                            text = False
                        restart = True
                        break
                    found = False
                    for j in range(<int32_t>self.family.size()):
                        if self.family[j] == y:
                            found = True
                            break
                    if not found:
                        if <int32_t>self.family.size() >= MAX_FAMILY:
                            return self.no_family(set_id)
                        reach_lo[self.family.size()] = part_lo[p] if p < n_parts else 0
                        reach_hi[self.family.size()] = part_hi[p] if p < n_parts else 0
                        reach_text[self.family.size()] = p >= n_parts
                        self.family.push_back(y)
                i += 1
            if restart:
                continue
            for i in range(self.family.size()):
                x = self.family[i]
                if not (self.summaries[x].total_flags & TOTAL_KNOWN):
                    self.summaries[x].total_ascii[0] = class_lo
                    self.summaries[x].total_ascii[1] = class_hi
                    self.summaries[x].total_flags = TOTAL_KNOWN | (TOTAL_TEXT if text else 0) | \
                        (TOTAL_PARTIALS if partials else 0)
            return 0
        return self.no_family(set_id)

    cdef int collect_tops(self, int32_t x) except -1 nogil:
        """family_tops: the distinct character classes on top of the set's stacks (element positions), each
        summarized (element_info)."""
        cdef const grammar_element* elements = self.pool.rules.elements.data()
        cdef int64_t k
        cdef node_t stack
        cdef position_t top
        self.family_tops.clear()
        for k in range(self.set_start[x], self.set_start[x + 1]):
            stack = self.set_nodes[k]
            if is_bottom(stack) or is_token_element(&elements[self.pool.nodes[stack].element]):
                continue
            top = self.pool.nodes[stack].element
            if find(self.family_tops.begin(), self.family_tops.end(), top) == self.family_tops.end():
                self.element_info(top)
                self.family_tops.push_back(top)
        return 0

    cdef bint text_steps(self) except -1 nogil:
        """Whether the tops of collect_tops take every text code point >= 0x80 between them; if so, text_reps gets
        one code point per group of them that match the same tops (the step depends only on which): 0x80 alone
        when each top takes all of them alike, else one per distinct match among the pieces the tops' interval
        bounds cut the text range into. False also past 64 distinct tops or 64 groups."""
        cdef const grammar_element* elements = self.pool.rules.elements.data()
        cdef uint64_t signatures[64]
        cdef vector[pair[uint32_t, uint32_t]] intervals, scratch
        cdef vector[uint32_t] bounds
        cdef const grammar_element* after
        cdef int32_t n_tops = <int32_t>self.family_tops.size(), n_signatures = 0, t, s
        cdef bint constant = True, member = False, seen
        cdef size_t j
        cdef position_t top
        cdef uint32_t cp
        cdef uint64_t signature
        self.text_reps.clear()
        if n_tops > 64:
            return False
        for t in range(n_tops):
            top = self.family_tops[t]
            self.element_text_info(top)
            if not (self.element_flags[top] & ELEMENT_CONSTANT_TEXT):
                constant = False
            elif self.element_flags[top] & ELEMENT_MEMBER_TEXT:
                member = True
        if constant:
            if member:
                self.text_reps.push_back(0x80)   # every text code point matches the same tops as 0x80
            return member
        # the text range cut at every bound of every top's intervals: within a piece, each top takes all or none
        bounds.push_back(0x80)
        bounds.push_back(TEXT_LOW_END + 1)
        bounds.push_back(TEXT_HIGH_START)
        bounds.push_back(TEXT_MAX + 1)
        for t in range(n_tops):
            intervals.clear()
            class_intervals(&elements[self.family_tops[t]], intervals, scratch)
            for j in range(intervals.size()):
                if 0x80 < intervals[j].first <= TEXT_MAX:
                    bounds.push_back(intervals[j].first)
                if 0x80 <= intervals[j].second < TEXT_MAX:
                    bounds.push_back(intervals[j].second + 1)
        sort(bounds.begin(), bounds.end())
        for j in range(bounds.size()):
            cp = bounds[j]
            if cp > TEXT_MAX or (j > 0 and bounds[j - 1] == cp) or (TEXT_LOW_END < cp < TEXT_HIGH_START):
                continue
            signature = 0
            for t in range(n_tops):
                if self.class_takes(self.family_tops[t], cp, &after):
                    signature |= (<uint64_t>1) << t
            if signature == 0:
                return False   # a text code point no top takes
            seen = False
            for s in range(n_signatures):
                if signatures[s] == signature:
                    seen = True
                    break
            if not seen:
                if n_signatures == 64:
                    return False
                signatures[n_signatures] = signature
                n_signatures += 1
                self.text_reps.push_back(cp)
        return True

    cdef int no_family(self, int32_t set_id) except -1 nogil:
        """No family for the set. The members explored keep theirs unknown: one may have a family of its own (the
        string's set when the set before the quote failed)."""
        self.summaries[set_id].total_ascii[0] = 0
        self.summaries[set_id].total_ascii[1] = 0
        self.summaries[set_id].total_flags = TOTAL_KNOWN
        return 0

    cdef bint family_accepts(self, int32_t set_id, uint64_t ascii_lo, uint64_t ascii_hi, uint8_t flags) noexcept nogil:
        """Whether every token of a subtree with this summary (its code points' ASCII bits and SUBTREE_* flags, the
        edges into it included) is accepted from the set by its family (compute_family, done)."""
        if flags & (SUBTREE_OVERLONG_END | SUBTREE_ODD):
            return False
        if (ascii_lo & ~self.summaries[set_id].total_ascii[0]) or (ascii_hi & ~self.summaries[set_id].total_ascii[1]):
            return False
        if (flags & SUBTREE_NON_ASCII) and not (self.summaries[set_id].total_flags & TOTAL_TEXT):
            return False
        if (flags & SUBTREE_PARTIAL_END) and not (self.summaries[set_id].total_flags & TOTAL_PARTIALS):
            return False
        return True

    cdef int compute_viable(self, int32_t set_id) except -1 nogil:
        """The code points some stack of the set can take next, as sorted disjoint intervals."""
        cdef const grammar_element* elements = self.pool.rules.elements.data()
        cdef const grammar_element* pos
        cdef vector[pair[uint32_t, uint32_t]] intervals, own
        cdef uint32_t last
        cdef uint32_t top_value = ~(<uint32_t>0)
        cdef node_t stack
        cdef int64_t k
        cdef size_t j
        for k in range(self.set_start[set_id], self.set_start[set_id + 1]):
            stack = self.set_nodes[k]
            if is_bottom(stack):
                continue
            pos = &elements[self.pool.nodes[stack].element]
            if is_token_element(pos):
                continue
            class_intervals(pos, intervals, own)
        sort(intervals.begin(), intervals.end())
        # merge overlapping and touching intervals
        self.summaries[set_id].viable_start = <int64_t>self.viable_bounds.size()
        for j in range(intervals.size()):
            if self.summaries[set_id].viable_count > 0:
                last = self.viable_bounds[self.viable_bounds.size() - 1]
                if last == top_value or intervals[j].first <= last + 1:
                    if intervals[j].second > last:
                        self.viable_bounds[self.viable_bounds.size() - 1] = intervals[j].second
                    continue
            self.viable_bounds.push_back(intervals[j].first)
            self.viable_bounds.push_back(intervals[j].second)
            self.summaries[set_id].viable_count += 1
        return 0
