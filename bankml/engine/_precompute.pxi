# Included by _grammar.pyx (one extension, so the hot calls stay within one C translation unit).
# The build ahead of use: the plan of which segment entries to build first (from the rules alone: the
# frames that can lie under each rule's, positions by distance from the start, bounded repetitions last),
# the background thread that runs it, and the analyses of the rules it reads (nullability, the closure of
# tail references, llama.cpp's repetition chains and their canonical positions). Owns no ids: it asks
# the context to build entries (MatchContext.build_frames, under the lock).
# Declarations: _precompute.pxd (included by _grammar.pxd).

# The background builds running now. A fork waits for them (each is bounded by its budget) so that a child
# never starts with a context lock held by a thread it does not have.
_PRECOMPUTE_THREADS = set()
_PRECOMPUTE_GUARD = threading.Lock()


def _run_precompute(context, seconds):
    try:
        context.precompute(seconds)
    finally:
        with _PRECOMPUTE_GUARD:
            _PRECOMPUTE_THREADS.discard(threading.current_thread())


def _join_precompute_threads():
    with _PRECOMPUTE_GUARD:
        threads = list(_PRECOMPUTE_THREADS)
    for thread in threads:
        if thread is not threading.current_thread():
            thread.join()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_join_precompute_threads)


def _precompute(MatchContext ctx, double seconds):
    """Build segment entries for the grammar's positions ahead of use, nearest the start first,
    for at most `seconds` (of this thread's time); returns the number built.

    Every element a stack can rest on (a character class or token terminal) gets the entry of its
    own frame; a position whose frame pops out too often (a one-character rule, a step of a
    bounded repetition) gets one per chain of frames that can lie under it, as deep as it takes.
    The chains come from the rules alone: which positions a rule returns to (the element after
    each reference to it, through references in tail position). What is not built in time is
    built on first use.
    """
    if ctx.walk.trie is None or seconds <= 0:
        return 0
    cdef double deadline = time.thread_time() + seconds
    cdef int steps = 0
    cdef const grammar_element* elements = ctx.rules.elements.data()
    cdef Py_ssize_t n_elements = ctx.rules.elements.size()
    cdef Py_ssize_t n_rules = ctx.rules.rule_start.size()
    cdef Py_ssize_t pos, rule_id, q
    cdef trie_view trie = ctx.walk.trie.view()
    cdef vector[uint8_t] inner
    cdef int32_t step, r
    rule_of = ctx.rules.rule_of()
    # The frames that can lie right under a frame of each rule: the element after each reference to
    # it, or for a reference in tail position, whatever lies under the referencing rule's frame.
    direct = [set() for _ in range(n_rules)]
    tail = [set() for _ in range(n_rules)]
    for q in range(n_elements - 1):
        if elements[q].type == LLAMA_GRETYPE_RULE_REF:
            if is_end_of_sequence(&elements[q + 1]):
                tail[elements[q].value].add(rule_of[q])
            else:
                direct[elements[q].value].add(q + 1)
    direct[ctx.rules.root_id].add(-1)   # the root's frames rest on the empty stack
    returns = [sorted(found) for found in _closure(direct, tail)]
    # Positions in order of how many characters it takes to reach them from the start (0-1 BFS:
    # entering a rule or leaving one is free, a terminal costs one).
    distance = {}
    queue = collections.deque()
    for start in ctx.rules.alternative_starts(ctx.rules.root_id):
        queue.append((0, start))
    while queue:
        d, pos = queue.popleft()
        steps += 1
        if steps % PLANNING_STEPS_PER_YIELD == 0:
            time.sleep(0)   # (let a thread waiting for the GIL have it: this may run in the background)
        if pos in distance:
            continue
        distance[pos] = d
        if is_end_of_sequence(&elements[pos]):
            for below in returns[rule_of[pos]]:
                if below >= 0 and below not in distance:
                    queue.appendleft((d, below))
        elif elements[pos].type == LLAMA_GRETYPE_RULE_REF:
            for start in ctx.rules.alternative_starts(elements[pos].value):
                if start not in distance:
                    queue.appendleft((d, start))
            if ctx.segments.rule_nullable[elements[pos].value] and pos + 1 not in distance:
                queue.appendleft((d, pos + 1))
        else:
            queue.append((d + 1, ctx.rules.after_terminal(pos)))
    # (a position far out in a long bounded repetition shares the entry of its canonical position)
    tops = sorted((d, p) for p, d in distance.items()
                  if elements[p].type in (LLAMA_GRETYPE_CHAR, LLAMA_GRETYPE_CHAR_NOT, LLAMA_GRETYPE_CHAR_ANY,
                                          LLAMA_GRETYPE_TOKEN, LLAMA_GRETYPE_TOKEN_NOT)
                  and ctx.segments.canonical_shift[p] == 0)
    # How far into a bounded repetition each rule lies (0 outside one): a segment whose frames lie
    # deep in one is reached only by long text, and the ones near a chain's end cost the most to walk,
    # so they come after every shallower segment.
    offset = {}
    inner = _chain_inner(ctx.segments.chain_next)
    for rule_id in range(<Py_ssize_t>inner.size()):
        if ctx.segments.chain_next[rule_id] < 0 or inner[rule_id]:
            continue
        step = 0
        r = rule_id
        while ctx.segments.chain_next[r] >= 0 and r not in offset:
            offset[r] = step
            step += 1
            r = ctx.segments.chain_next[r]
    heap = [(0, d, i, [top]) for i, (d, top) in enumerate(tops)]
    heapq.heapify(heap)
    counter = len(heap)
    before = ctx.segments.counters.built
    try:
        _build_heap(ctx, heap, counter, deadline, returns, rule_of, offset)
    except GrammarError:
        pass  # a state past max_stacks or the pool bounds: left to first use, which reports it
    finally:
        with nogil:
            PyThread_acquire_lock(ctx.lock, 1)
            ctx.reserve_headroom()
            PyThread_release_lock(ctx.lock)
    return ctx.segments.counters.built - before


def _build_heap(MatchContext ctx, list heap, counter, double deadline, list returns, list rule_of, dict offset):
    cdef int32_t entry_id
    def depth_into_repetitions(frames):
        return max(offset.get(rule_of[f], 0) for f in frames)
    while heap:
        if time.thread_time() > deadline:
            return
        _, d, _, frames = heapq.heappop(heap)
        last = frames[len(frames) - 1]   # (no negative indices: wraparound is off)
        below = returns[rule_of[last]]
        if len(frames) > 1 and ctx.transparent_locked(last) and len(frames) < MAX_SEGMENT_LENGTH \
                and -1 not in below:
            extended = [frames + [f] for f in below]   # never end a segment on a transparent frame
        else:
            entry_id = ctx.build_frames(frames, below == [-1])
            if entry_id == CACHE_FULL:
                return
            if entry_id != NO_ENTRY or len(frames) >= MAX_SEGMENT_LENGTH:
                continue
            extended = [frames + [f] for f in below if f >= 0]
        for longer in extended:
            heapq.heappush(heap, (depth_into_repetitions(longer), d, counter, longer))
            counter += 1


cdef vector[uint8_t] _nullable_rules(Rules rules):
    """Per rule id, whether the rule can match the empty string (the least fixpoint of _rules; kept on the
    Rules, which parse's left-recursion check usually computed already)."""
    return rules_nullable_of(rules)[0]


def _closure(list direct, list edges):
    """Per node i, direct[i] together with the direct sets of every node reachable from i along edges
    (Tarjan's strongly connected components, so a chain of n tail references costs O(n), not O(n^2))."""
    cdef Py_ssize_t n = len(direct)
    index = [-1] * n
    low = [0] * n
    on_stack = [False] * n
    component = [-1] * n
    result = [None] * n
    stack = []
    counter = 0
    for root in range(n):
        if index[root] >= 0:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack[root] = True
        while work:
            node, children = work[len(work) - 1]
            advanced = False
            for child in children:
                if index[child] < 0:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack[child] = True
                    work.append((child, iter(edges[child])))
                    advanced = True
                    break
                if on_stack[child]:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[len(work) - 1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                # a component: its members share one set, the union of theirs and of the components
                # they reach (all finished already)
                members = []
                while True:
                    member = stack.pop()
                    on_stack[member] = False
                    members.append(member)
                    if member == node:
                        break
                found = set()
                for member in members:
                    found |= direct[member]
                for member in members:
                    for child in edges[member]:
                        if result[child] is not None:
                            found |= result[child]
                for member in members:
                    result[member] = found
    return result


cdef inline bint _all_nullable_refs(const grammar_element* elements, position_t first, position_t stop,
                                    const vector[uint8_t]& nullable) noexcept nogil:
    """Whether elements[first:stop] are all references to nullable rules (an empty range: True)."""
    cdef position_t q
    for q in range(first, stop):
        if elements[q].type != LLAMA_GRETYPE_RULE_REF or not nullable[elements[q].value]:
            return False
    return True


cdef inline bint _same_elements(const grammar_element* elements, position_t a, position_t b,
                                position_t n) noexcept nogil:
    """Whether elements[a:a+n] and elements[b:b+n] are the same (type, value) sequence."""
    cdef position_t q
    for q in range(n):
        if elements[a + q].type != elements[b + q].type or elements[a + q].value != elements[b + q].value:
            return False
    return True


cdef int _repetition_chains_into(Rules rules, const vector[uint8_t]& nullable, vector[int32_t]& chain_depth,
                                  vector[int32_t]& chain_next) except -1:
    """The chains llama.cpp writes for x{m,n}: n - m nested rules R_k ::= x R_(k-1) | down to
    R_0 ::= x |, each x taking at least one character. Fills, per rule id, chain_depth (k for the rules
    R_1 .. R_(n-m-1) of every such chain, 0 for every other rule, R_0 included) and chain_next (R_(k-1),
    -1 when chain_depth is 0).

    One pass over the rules' flat elements and one walk down each chain, over typed arrays (no Python
    object per rule): next to nothing on a grammar of thousands of rules or a chain of thousands of steps."""
    cdef const grammar_element* elements = rules.elements.data()
    cdef Py_ssize_t n_rules = rules.rule_start.size()
    cdef Py_ssize_t rule_id, k
    cdef position_t pos, first, x_len, last
    cdef int32_t following
    # per rule: the body of R ::= body | (body_len -1: not that shape), whether it is a base (R ::= x |,
    # x not all nullable references) and, for a step (R ::= x next |), the next rule (-1: not a step)
    cdef vector[position_t] body_start, body_len
    cdef vector[int32_t] step_next, depth
    cdef vector[uint8_t] is_base, on_path
    cdef vector[int32_t] path
    cdef int32_t r
    cdef int32_t UNSET = -2
    body_start.assign(n_rules, 0)
    body_len.assign(n_rules, -1)
    step_next.assign(n_rules, -1)
    is_base.assign(n_rules, 0)
    for rule_id in range(n_rules):
        first = rules.rule_start[rule_id]
        pos = first
        while elements[pos].type != LLAMA_GRETYPE_ALT and elements[pos].type != LLAMA_GRETYPE_END:
            pos += 1
        # two alternatives, the first not empty and the second empty
        if pos == first or elements[pos].type != LLAMA_GRETYPE_ALT or elements[pos + 1].type != LLAMA_GRETYPE_END:
            continue
        body_start[rule_id] = first
        body_len[rule_id] = pos - first
        if not _all_nullable_refs(elements, first, pos, nullable):
            is_base[rule_id] = 1
        last = pos - 1
        if (elements[last].type == LLAMA_GRETYPE_RULE_REF and <Py_ssize_t>elements[last].value != rule_id
                and last > first and not _all_nullable_refs(elements, first, last, nullable)):
            step_next[rule_id] = <int32_t>elements[last].value
    # depth[r]: k for a step R_k of a chain ending in a base, -1 for a step that is not one, UNSET: not seen
    depth.assign(n_rules, UNSET)
    on_path.assign(n_rules, 0)
    for rule_id in range(n_rules):
        if step_next[rule_id] < 0 or depth[rule_id] != UNSET:
            continue
        path.clear()
        r = <int32_t>rule_id
        while step_next[r] >= 0 and depth[r] == UNSET and not on_path[r]:
            path.push_back(r)
            on_path[r] = 1
            r = step_next[r]
        for k in range(<Py_ssize_t>path.size() - 1, -1, -1):
            r = path[k]
            on_path[r] = 0
            following = step_next[r]
            x_len = body_len[r] - 1
            if (step_next[following] >= 0 and body_len[following] - 1 == x_len
                    and _same_elements(elements, body_start[following], body_start[r], x_len)
                    and depth[following] >= 0):
                depth[r] = depth[following] + 1
            elif (is_base[following] and body_len[following] == x_len
                    and _same_elements(elements, body_start[following], body_start[r], x_len)):
                depth[r] = 1
            else:
                depth[r] = -1
    chain_depth.assign(n_rules, 0)
    chain_next.assign(n_rules, -1)
    for rule_id in range(n_rules):
        if depth[rule_id] > 0:
            chain_depth[rule_id] = depth[rule_id]
            chain_next[rule_id] = step_next[rule_id]
    return 0


cdef vector[uint8_t] _chain_inner(const vector[int32_t]& chain_next) except *:
    """Per rule, whether it is the next step of some chain rule (so not the top of its chain)."""
    cdef vector[uint8_t] inner
    cdef size_t r
    inner.assign(chain_next.size(), 0)
    for r in range(chain_next.size()):
        if chain_next[r] >= 0:
            inner[chain_next[r]] = 1
    return inner


cdef int _repetition_canonical_into(Rules rules, const vector[int32_t]& chain_depth,
                                    const vector[int32_t]& chain_next, int32_t limit,
                                    zero_array[int32_t]& shift) except -1:
    """Per element position, the position a segment key uses for it: the same offset in the chain
    rule `limit` steps from the chain's end, when the position's rule lies further out. Written into
    shift (all zero on entry, one per element) as the canonical position minus the position: only the
    positions that move are written.

    A frame in R_k (see _repetition_chains_into), with k + 1 x's still allowed, behaves like the frame
    in R_j for all j, k >= limit as long as no more than `limit` x's can be taken, which holds within one
    token when each x takes at least one code point and limit exceeds the longest token: such frames
    share one segment entry.
    """
    cdef const grammar_element* elements = rules.elements.data()
    cdef Py_ssize_t n_rules = chain_next.size()
    cdef Py_ssize_t i
    cdef position_t start, target_start
    cdef vector[int32_t] target_of
    cdef vector[uint8_t] inner = _chain_inner(chain_next)
    cdef int32_t r, top, target
    target_of.assign(n_rules, -1)
    for top in range(n_rules):
        if chain_next[top] < 0 or inner[top]:
            continue
        # from the chain's outermost rule down to the one `limit` steps from the end: every rule on the
        # way is a step of the same chain and maps onto that one
        r = top
        while chain_next[r] >= 0 and chain_depth[r] > limit:
            r = chain_next[r]
        target = r
        r = top
        while r != target:
            target_of[r] = target
            r = chain_next[r]
    for r in range(n_rules):
        target = target_of[r]
        if target < 0:
            continue
        start, target_start = rules.rule_start[r], rules.rule_start[target]
        i = 0
        while True:
            shift[start + i] = <int32_t>(<int64_t>target_start - <int64_t>start)
            if elements[start + i].type == LLAMA_GRETYPE_END:
                break
            i += 1
    return 0
