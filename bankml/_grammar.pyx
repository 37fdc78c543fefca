# cython: language_level=3
"""The GBNF engine: flat rules, persistent stacks, and llama.cpp's matcher.

Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License,
Copyright (c) 2023-2026 The ggml authors: src/llama-grammar.cpp
(llama_grammar_advance_stack, match_char, match_partial_char, match_token,
accept_chr, accept_token, accept_str, reject_candidates(_for_stack),
llama_grammar_apply_impl, llama_grammar_accept_impl with lazy triggers).

Owns: the flattened rules (one element array, rules addressed by integer
position), the matcher's stacks (hash-consed nodes of a persistent tree, so a
stack is one integer), its partial UTF-8 state and its trigger state, and the
per-vocabulary decoded code points. It must not parse text (parser.py does)
nor read vocabulary files (vocab.py does).
"""
import collections
import heapq
import operator
import re
import time

import numpy as np
cimport numpy as cnp
from cpython.bytes cimport PyBytes_AS_STRING
from cpython.pythread cimport (PyThread_acquire_lock, PyThread_allocate_lock, PyThread_free_lock,
                               PyThread_get_thread_ident, PyThread_release_lock)
from libc.math cimport INFINITY
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from cython.operator cimport dereference as deref
from libcpp.algorithm cimport find, lower_bound, sort, unique, upper_bound
from libc.string cimport memcmp, memcpy, memset
from libcpp.utility cimport pair
from libcpp.vector cimport vector

from bankml._typedefs cimport element_value_t, node_t, offset_t, position_t, token_t
from bankml._utf8 cimport decode_utf8, partial_utf8
from bankml._trie cimport CHILD_BLOCK, SUBTREE_NON_ASCII, SUBTREE_OVERLONG_END, SUBTREE_PARTIAL_END
from bankml._bits cimport (ctz64, drain_words, next_set_position, next_unset_position, position_drain,
                           set_position, set_position_range, set_token_bit, clear_token_bit, words_hash)
from bankml._charclass cimport (class_accepts_all_partials, class_constant_from, class_intervals, is_end_of_sequence,
                                is_token_element, match_char, match_partial_char, match_token)
from bankml._rules cimport make_rules

from bankml.errors import GrammarError
from bankml._trie import decoded_vocab, vocab_trie
from bankml import _rules

cnp.import_array()

# Rules lives in _rules; _grammar re-exports it (and the pickle helper of Rules pickled before the split).
globals().update(Rules=_rules.Rules, _rebuild_rules=_rules._rebuild_rules)

# Node 0 of every pool is the empty stack; node 1 stands for "whatever lies below a stack's top
# segment" in the stacks the segment cache walks (a path that reaches it has popped out of the segment).
cdef node_t EMPTY_STACK = 0
cdef node_t SEGMENT_BASE = 1
# Bounds on what one matcher may hold; llama.cpp has none and grows until memory runs out.
# llama.cpp has no bound; its de-duplication (and bankml's, kept identical in order) is quadratic in the
# stack count, and a state with thousands of stacks already costs llama.cpp seconds per mask.
DEFAULT_MAX_STACKS = 4096
# How long (seconds of the calling thread) the first matcher of a (Rules, Vocab) spends building the
# segment cache ahead of use; what is not built by then is built on first use.
DEFAULT_PRECOMPUTE_SECONDS = 0.03
cdef size_t MAX_NODES = 1 << 24
# New matchers start a fresh context once the shared one holds this many nodes.
cdef size_t CONTEXT_NODE_BUDGET = 1 << 22
# Bounds of the fast path's memory; past them it forgets what it memoized and starts over.
cdef size_t MAX_SETS = 1 << 20
cdef size_t MAX_MASK_CACHE_BYTES = 12 << 20
cdef size_t MAX_SEGMENT_CACHE_BYTES = 16 << 20
# A segment whose walk pops out at more trie nodes than this, or above subtrees of more than
# CONTINUATION_NODES_PER_NODE times as many nodes in all, grows by a frame: the continuations are
# walked again, from the real stack below, every time the entry serves, so they must stay small.
cdef size_t DEFAULT_MAX_CONTINUATIONS = 128
cdef size_t CONTINUATION_NODES_PER_NODE = 16
# Continuation answers with more tokens than this are not kept.
cdef int64_t MAX_MEMOIZED_CONTINUATION = 4096
# Segments longer than this are not tried one frame at a time: the whole stack is the segment.
cdef int32_t MAX_SEGMENT_LENGTH = 16
# The segment length that means "every frame of the stack" (find_entry asks for it after MAX_SEGMENT_LENGTH;
# segment_of then cuts nowhere, so the stack below is empty and the walk is never cut short).
cdef int32_t WHOLE_STACK = 1 << 30
# A whole stack deeper than this is not made a segment: the mask is answered on the reference path.
cdef int32_t MAX_WHOLE_SEGMENT_FRAMES = 1024
# Continuations followed further down than this many frames below a segment: the reference path answers.
cdef int32_t MAX_CONTINUATION_DEPTH = 256
cdef int64_t MASKS_PER_CHUNK = 16
# Work budgets (bankml's; llama.cpp has none). One advance_stack expands at most MAX_ADVANCE_STEPS stacks
# (a grammar without left recursion needs about one per alternative it enters; 1M steps take about 1 s
# where every step pushes a new node, as in left recursion that escaped the checks).
cdef int64_t MAX_ADVANCE_STEPS = 1 << 20
# A fast mask that has stepped this many stacks and visited this many trie nodes in all (cold masks of the
# test grammars on Qwen2 take at most ~2M) stops and answers on the reference path, which needs no memo.
cdef int64_t FAST_WORK_BUDGET = 1 << 24
# A reference mask takes at most this many steps (a candidate token checked against a stack, or one
# stack advance_stack expands): 20-25 ns each measured, so about 3 s. A mask of Qwen2 (151,936 tokens)
# reaches it from about 900 stacks that all reject nearly every token; llama.cpp would answer such a
# state after seconds of its own, bankml raises instead.
cdef int64_t REFERENCE_WORK_BUDGET = 1 << 27
cdef int64_t NO_WORK_LIMIT = 0x7FFFFFFFFFFFFFFF
# A subtree smaller than this is walked node by node rather than tested against the set's loop class.
cdef int32_t LOOP_TEST_MIN_NODES = 4


# Mask-cache chunks of contexts that are gone, kept for the next contexts: memory the process has
# already touched, so storing a mask in a new context costs a copy and no page faults (a server
# that builds a grammar per request makes and drops contexts all the time).
cdef vector[vector[uint32_t]] chunk_pool
cdef size_t chunk_pool_words = 0
cdef size_t MAX_CHUNK_POOL_WORDS = (32 << 20) // 4
cdef PyThread_type_lock chunk_pool_lock = PyThread_allocate_lock()


cdef void take_chunk(vector[uint32_t]& chunk, size_t capacity) noexcept nogil:
    """An empty chunk with room for `capacity` words, from the pool when it has one."""
    global chunk_pool_words
    PyThread_acquire_lock(chunk_pool_lock, 1)
    if not chunk_pool.empty():
        chunk.swap(chunk_pool.back())
        chunk_pool_words -= chunk.capacity()
        chunk_pool.pop_back()
    PyThread_release_lock(chunk_pool_lock)
    chunk.clear()
    chunk.reserve(capacity)  # reserved, not touched: no zero-fill


cdef void release_chunks(vector[vector[uint32_t]]& chunks) noexcept nogil:
    """Hand a context's chunks to the pool (as many as it keeps) and empty the list."""
    global chunk_pool_words
    cdef size_t i
    PyThread_acquire_lock(chunk_pool_lock, 1)
    for i in range(chunks.size()):
        if chunk_pool_words + chunks[i].capacity() > MAX_CHUNK_POOL_WORDS:
            break
        chunk_pool_words += chunks[i].capacity()
        chunk_pool.push_back(vector[uint32_t]())
        chunk_pool.back().swap(chunks[i])
    PyThread_release_lock(chunk_pool_lock)
    chunks.clear()


# The conventions of the set summaries (set_summary in _grammar.pxd). A set id is an int32 >= 0; NO_SET
# (-1) is "no set": the transition no stack survives, a successor or run end that does not exist. Methods
# that return a set id or an entry id raise with -2 (`except -2`), those that return a status -1.
cdef enum:
    NO_SET = -1
    RUN_UNKNOWN = -1         # run_length before compute_run
    VIABLE_UNKNOWN = -1      # viable_start before compute_viable
# run_length of a run that never ends (it reaches a set that loops)
cdef int32_t RUN_UNBOUNDED = 1 << 30

# element_flags bits: what compute_loop needs to know about a character class, computed once
cdef enum:
    ELEMENT_KNOWN = 1
    ELEMENT_CONSTANT_ABOVE = 2   # membership is the same for every code point >= 0x80
    ELEMENT_MEMBER_ABOVE = 4     # ... and those code points are members
    ELEMENT_ALL_PARTIALS = 8     # match_partial_char holds for every partial character that can complete


# Entry ids are int32 >= 0; NO_ENTRY: a segment (or continuation) that pops out too often to keep.
cdef enum:
    NO_ENTRY = -1
# A walk's max_pops for a segment that is the whole stack: nothing lies below it, so no longer segment
# would pop out less.
cdef size_t POPS_UNBOUNDED = <size_t>-1


cdef inline walk_state plain_walk() noexcept nogil:
    """The state of a walk that records nothing (a mask walk, a continuation walked from the real stack)."""
    cdef walk_state walk
    walk.collect_pops = False
    walk.aborted = False
    walk.max_pops = POPS_UNBOUNDED
    walk.pop_nodes = 0
    walk.pops = NULL
    return walk


cdef inline walk_state segment_walk(vector[int32_t]* pops, size_t max_pops) noexcept nogil:
    """The state of a walk from a segment: it records into *pops (emptied here) the nodes where paths pop
    out, and aborts past max_pops of them (or CONTINUATION_NODES_PER_NODE times as many nodes below)."""
    cdef walk_state walk
    pops.clear()
    walk.collect_pops = True
    walk.aborted = False
    walk.max_pops = max_pops
    walk.pop_nodes = 0
    walk.pops = pops
    return walk


cdef inline bint is_bottom(node_t stack) noexcept nogil:
    """The empty stack or the segment base: no element on top, matches no code point."""
    return stack <= SEGMENT_BASE


cdef inline void add_unique(vector[node_t]& stacks, node_t stack) noexcept nogil:
    if find(stacks.begin(), stacks.end(), stack) == stacks.end():
        stacks.push_back(stack)


cdef class MatchContext:
    """What the matchers of one (Rules, Vocab) pair share: the stack-node pool, the stack sets,
    their transitions and loop classes, and the mask cache.

    Node and set ids mean the same to every matcher of the context, so a state one
    matcher worked out (a transition, a whole mask) serves all of them and every
    clone. Matchers take the context's lock around everything that may add to it.
    """

    def __cinit__(self):
        cdef stack_node root
        root.element = -1
        root.parent = -1
        self.nodes.push_back(root)   # EMPTY_STACK
        root.element = -2
        self.nodes.push_back(root)   # SEGMENT_BASE
        self.set_start.push_back(0)
        self.use_segments = True
        self.continuations_limit = DEFAULT_MAX_CONTINUATIONS
        self.work_limit = NO_WORK_LIMIT
        self.fast_work_budget = FAST_WORK_BUDGET
        self.lock = PyThread_allocate_lock()
        if self.lock == NULL:
            raise MemoryError("could not allocate the grammar context's lock")

    def __init__(self, Rules rules, vocab, size_t max_stacks):
        self.rules = rules
        self.vocab = vocab
        self.max_stacks = max_stacks
        self.decoded = decoded_vocab(vocab) if vocab is not None else None
        self.trie = vocab_trie(vocab) if vocab is not None else None
        if self.trie is not None:
            words = self.trie.token_words
            self.trie_token_words.resize(words.shape[0])
            if words.shape[0]:
                memcpy(self.trie_token_words.data(), cnp.PyArray_DATA(words), words.shape[0] * sizeof(uint32_t))
            self.trie_arrays = self.trie.view()
            self.max_token_depth = self.trie.max_depth
            self.repetition_chains = _repetition_chains(rules)
            self.canonical = _repetition_canonical(rules, self.repetition_chains, self.max_token_depth + 2)
        if vocab is not None:
            for token_id in sorted(int(t) for t in vocab.eog_ids):
                self.eog_tokens.push_back(token_id)
            _check_token_ids(rules, self.decoded.n_vocab)
        self.segment_lengths.assign(rules.elements.size(), 0)
        self.element_transparent.assign(rules.elements.size(), 0)
        self.rule_nullable = _nullable_rules(rules)
        self.element_ascii.assign(2 * rules.elements.size(), 0)
        self.element_flags.assign(rules.elements.size(), 0)

    def __dealloc__(self):
        release_chunks(self.mask_chunks)
        if self.lock != NULL:
            PyThread_free_lock(self.lock)

    @property
    def n_nodes(self):
        return self.nodes.size()

    @property
    def n_sets(self):
        return self.set_start.size() - 1

    @property
    def cache_bytes(self):
        """Memory held by the memoized sets, transitions, masks and segment entries, in bytes (approximate)."""
        return (self.nodes.size() * 8 + self.node_ids.size() * 32 + self.set_nodes.size() * 4
                + self.set_start.size() * 41 + self.transitions.size() * 32
                + self.pattern_transitions.size() * 40 + self.mask_chunks.size() * MASKS_PER_CHUNK * self.trie_token_words.size() * 4
                + self.position_bits.size() * 8 + self.segment_bytes
                + self.segment_lengths.size() * 4 + self.segment_nodes.size() * 40 + self.context_sets.size() * 24)

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
                "built": self.segment_entries_built, "continuation_entries": self.continuation_entries_built,
                "hits": self.segment_hits,
                "grown": self.segment_walks_grown, "continuation_walks": self.continuation_walks,
                "bytes": self.segment_bytes}

    # -- building the segment cache ahead of use ------------------------------------
    def precompute(self, double seconds):
        """Build segment entries for the grammar's positions ahead of use, nearest the start first,
        for at most `seconds` (of this thread's time); returns the number built.

        Every element a stack can rest on (a character class or token terminal) gets the entry of its
        own frame; a position whose frame pops out too often (a one-character rule, a step of a
        bounded repetition) gets one per chain of frames that can lie under it, as deep as it takes.
        The chains come from the rules alone: which positions a rule returns to (the element after
        each reference to it, through references in tail position). What is not built in time is
        built on first use.
        """
        if self.trie is None or seconds <= 0:
            return 0
        cdef double deadline = time.thread_time() + seconds
        cdef const grammar_element* elements = self.rules.elements.data()
        cdef Py_ssize_t n_elements = self.rules.elements.size()
        cdef Py_ssize_t n_rules = self.rules.rule_start.size()
        cdef Py_ssize_t pos, rule_id, q
        cdef trie_view trie = self.trie.view()
        rule_of = self.rules.rule_of()
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
        direct[self.rules.root_id].add(-1)   # the root's frames rest on the empty stack
        returns = [sorted(found) for found in _closure(direct, tail)]
        # Positions in order of how many characters it takes to reach them from the start (0-1 BFS:
        # entering a rule or leaving one is free, a terminal costs one).
        distance = {}
        queue = collections.deque()
        for start in self.rules.alternative_starts(self.rules.root_id):
            queue.append((0, start))
        while queue:
            d, pos = queue.popleft()
            if pos in distance:
                continue
            distance[pos] = d
            if is_end_of_sequence(&elements[pos]):
                for below in returns[rule_of[pos]]:
                    if below >= 0 and below not in distance:
                        queue.appendleft((d, below))
            elif elements[pos].type == LLAMA_GRETYPE_RULE_REF:
                for start in self.rules.alternative_starts(elements[pos].value):
                    if start not in distance:
                        queue.appendleft((d, start))
                if self.rule_nullable[elements[pos].value] and pos + 1 not in distance:
                    queue.appendleft((d, pos + 1))
            else:
                queue.append((d + 1, self.rules.after_terminal(pos)))
        # (a position far out in a long bounded repetition shares the entry of its canonical position)
        tops = sorted((d, p) for p, d in distance.items()
                      if elements[p].type in (LLAMA_GRETYPE_CHAR, LLAMA_GRETYPE_CHAR_NOT, LLAMA_GRETYPE_CHAR_ANY,
                                              LLAMA_GRETYPE_TOKEN, LLAMA_GRETYPE_TOKEN_NOT)
                      and self.canonical[p] == p)
        self.ensure_position_bits()
        # How far into a bounded repetition each rule lies (0 outside one): a segment whose frames lie
        # deep in one is reached only by long text, and the ones near a chain's end cost the most to walk,
        # so they come after every shallower segment.
        offset = {}
        inner = {following for _, following in self.repetition_chains.values()}
        for rule_id in self.repetition_chains:
            if rule_id in inner:
                continue
            step = 0
            r = rule_id
            while r in self.repetition_chains and r not in offset:
                offset[r] = step
                step += 1
                r = self.repetition_chains[r][1]
        heap = [(0, d, i, [top]) for i, (d, top) in enumerate(tops)]
        heapq.heapify(heap)
        counter = len(heap)
        before = self.segment_entries_built
        try:
            self._build_heap(heap, counter, deadline, returns, rule_of, offset)
        except GrammarError:
            pass  # a state past max_stacks or the pool bounds: left to first use, which reports it
        finally:
            self.reserve_headroom()
        return self.segment_entries_built - before

    def _build_heap(self, list heap, counter, double deadline, list returns, list rule_of, dict offset):
        cdef int32_t entry_id
        cdef trie_view trie = self.trie.view()
        def depth_into_repetitions(frames):
            return max(offset.get(rule_of[f], 0) for f in frames)
        while heap:
            if time.thread_time() > deadline or self.segment_cache_full():
                return
            _, d, _, frames = heapq.heappop(heap)
            last = frames[len(frames) - 1]   # (no negative indices: wraparound is off)
            below = returns[rule_of[last]]
            if len(frames) > 1 and self.transparent(last) and len(frames) < MAX_SEGMENT_LENGTH and -1 not in below:
                extended = [frames + [f] for f in below]   # never end a segment on a transparent frame
            else:
                entry_id = self.build_frames(frames, below == [-1], &trie)
                if entry_id != -1 or len(frames) >= MAX_SEGMENT_LENGTH:
                    continue
                extended = [frames + [f] for f in below if f >= 0]
            for longer in extended:
                heapq.heappush(heap, (depth_into_repetitions(longer), d, counter, longer))
                counter += 1

    cdef void ensure_position_bits(self) noexcept nogil:
        """position_bits sized to the trie (all zero between walks)."""
        if self.position_bits.size() != <size_t>((self.trie_arrays.n_positions + 63) >> 6):
            self.position_bits.assign((self.trie_arrays.n_positions + 63) >> 6, 0)

    cdef void clear_masks(self) noexcept nogil:
        """Forget every cached mask (its chunks go back to the process-wide pool)."""
        release_chunks(self.mask_chunks)
        self.mask_slot.clear()
        self.n_cached_masks = 0

    cdef void reserve_headroom(self) noexcept nogil:
        """Give every memo table room to grow by half again before it must rehash: a rehash of a table
        the build filled costs a whole mask's budget, and it would land on some unlucky later mask."""
        self.node_ids.reserve(self.node_ids.size() * 3 // 2 + 1024)
        self.transitions.reserve(self.transitions.size() * 3 // 2 + 1024)
        self.pattern_transitions.reserve(self.pattern_transitions.size() * 3 // 2 + 1024)
        self.set_by_hash.reserve(self.set_by_hash.size() * 3 // 2 + 1024)
        self.segment_nodes.reserve(self.segment_nodes.size() * 3 // 2 + 1024)
        self.entry_of.reserve(self.entry_of.size() * 3 // 2 + 1024)
        self.context_sets.reserve(self.context_sets.size() * 3 // 2 + 1024)
        self.dense_offsets.reserve(self.dense_offsets.size() * 3 // 2 + 64)
        self.continuation_results.reserve(self.continuation_results.size() * 3 // 2 + 1024)
        self.continuation_entry_of.reserve(self.continuation_entry_of.size() * 3 // 2 + 1024)
        self.entry_results.reserve(self.entry_results.size() * 3 // 2 + 1024)
        self.mask_slot.reserve(1024)

    cdef size_t segment_cache_bytes(self) noexcept nogil:
        return ((self.entry_words.size() + self.entry_tokens.size() + self.entry_continuations.size()
                 + self.continuation_tokens.size()) * 4 + self.entries.size() * sizeof(segment_entry)
                + (self.continuation_results.size() + self.continuation_entry_of.size()
                   + self.entry_results.size()) * 40)

    cdef bint segment_cache_full(self) noexcept nogil:
        return self.segment_cache_bytes() > MAX_SEGMENT_CACHE_BYTES

    cdef int32_t build_frames(self, list frames, bint whole, const trie_view* trie) except -3:
        """Build the entry of a segment given as element positions, top first (whole: nothing lies
        under it), or find it built: its id, or -1 when it pops out too often."""
        cdef node_t node = SEGMENT_BASE
        cdef int32_t entry_id, length = len(frames)
        cdef position_t top = self.canonical[<position_t>frames[0]]
        cdef Py_ssize_t i
        with nogil:
            PyThread_acquire_lock(self.lock, 1)
        try:
            for i in range(length - 1, -1, -1):
                node = self.push(node, self.canonical[<position_t>frames[i]])
            it = self.entry_of.find(node)
            if it != self.entry_of.end():
                return deref(it).second
            with nogil:
                entry_id = self.build_entry(node, length, trie, POPS_UNBOUNDED if whole else self.continuations_limit)
            if entry_id < 0:
                return -1
            if length <= 32:
                self.segment_lengths[top] |= (<uint32_t>1) << (length - 1)
            return entry_id
        finally:
            PyThread_release_lock(self.lock)

    def _segment_entries(self):
        """Test shim: per segment entry, (segment length, accepted tokens or -1 when dense, continuations)."""
        return [(self.entries[i].length, self.entries[i].n_tokens, self.entries[i].n_continuations)
                for i in range(self.entries.size())]

    def _configure_budget(self, fast_work=None):
        """Test shim: the fast path's work budget per mask (FAST_WORK_BUDGET by default); forgets which sets
        went to the reference path."""
        with nogil:
            PyThread_acquire_lock(self.lock, 1)
            self.fast_failed.clear()
            self.clear_masks()
            PyThread_release_lock(self.lock)
        if fast_work is not None:
            self.fast_work_budget = int(fast_work)

    def _configure_segments(self, enabled=None, max_continuations=None):
        """Test and benchmark shim: turn the segment cache on or off, or change its continuation limit.
        Forgets every cached mask and entry, so the next masks are computed afresh."""
        with nogil:
            PyThread_acquire_lock(self.lock, 1)
            self.clear_segments()
            self.clear_masks()
            PyThread_release_lock(self.lock)
        if enabled is not None:
            self.use_segments = bool(enabled)
        if max_continuations is not None:
            self.continuations_limit = int(max_continuations)

    # -- the locked entry points: what a matcher calls, each taking the context's lock once --------
    cdef int initial_stacks(self, vector[node_t]& stacks) except -1 nogil:
        """llama_grammar_init_impl's stacks: each alternative of the root, advanced to its terminals."""
        cdef const grammar_element* elements = self.rules.elements.data()
        cdef position_t pos = self.rules.rule_start[self.rules.root_id]
        cdef node_t stack
        PyThread_acquire_lock(self.lock, 1)
        try:
            while True:
                stack = EMPTY_STACK
                if not is_end_of_sequence(&elements[pos]):
                    stack = self.push(EMPTY_STACK, pos)
                self.advance_stack(stack, stacks)
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
            self.accept_token_stacks(stacks, token, code_points, n_code_points, stacks_new)
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
                    self.accept_chr(stacks[j], code_points[i], next_stacks)
                stacks.swap(next_stacks)
                if stacks.size() > self.max_stacks:
                    with gil:
                        raise GrammarError(
                            f"grammar state exceeds {self.max_stacks} stacks (max_stacks); "
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
            self.reference_work = 0
            self.work = 0   # (advance_stack adds its steps: they count against the budget too)
            self.collect_rejects(stacks, state, vocab, ids, n, rejects, scratch)
            self.last_reference_work = self.reference_work + self.work
        finally:
            PyThread_release_lock(self.lock)
        return 0

    cdef int mask_into(self, const vector[node_t]& stacks, uint32_t* out) except -1 nogil:
        """fast_mask under the lock: 0, or 1 when the state is answered on the reference path."""
        PyThread_acquire_lock(self.lock, 1)
        try:
            return self.fast_mask(stacks, &self.trie_arrays, out)
        finally:
            PyThread_release_lock(self.lock)

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
                    element = self.rules.elements[self.nodes[node].element]
                    current.append((<int>element.type, <int>element.value))
                    node = self.nodes[node].parent
                current.reverse()
                out.append(current)
        finally:
            PyThread_release_lock(self.lock)
        return out

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
                self.ensure_position_bits()
                with nogil:
                    entry_id = self.find_entry(stack, &self.trie_arrays, &below)
                entry = self.entries[entry_id]
                conts = [self.entry_continuations[entry.continuations_start + c] for c in range(entry.n_continuations)]
            finally:
                PyThread_release_lock(self.lock)
            report.append((entry_id, entry.length, [(c, self.trie_arrays.node_end[c] - c) for c in conts], below))
        return report

    # -- the stack tree ------------------------------------------------------
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
                with gil:
                    raise GrammarError(f"fast path: the mask exceeds its work budget of {self.fast_work_budget} "
                                       "steps (FAST_WORK_BUDGET)")
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

    # -- masks -------------------------------------------------------------
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

    # -- the fast path: trie walk over hash-consed stack sets --------------------
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
        summary.flags = 0
        summary.partial_mode = PARTIAL_UNKNOWN
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
        cdef const grammar_element* elements = self.rules.elements.data()
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
                top = &elements[self.nodes[stack].element]
                if not is_token_element(top) and match_char(top, cp, &after):
                    matches |= (<uint64_t>1) << (k - first)
            if matches == 0:
                return NO_SET
            key = (<uint64_t><uint32_t>set_id << 32) ^ (matches * 0x9E3779B97F4A7C15ULL)
            it = self.pattern_transitions.find(key)
            if it != self.pattern_transitions.end() and deref(it).second.first == matches:
                return deref(it).second.second
        self.work += last - first
        if self.work > self.work_limit:
            with gil:
                raise GrammarError(f"fast path: the mask exceeds its work budget of {self.fast_work_budget} "
                                   "steps (FAST_WORK_BUDGET)")
        self.step_stacks.clear()  # scratch of the context: step_set never runs inside itself
        for k in range(first, last):
            stack = self.set_nodes[k]
            if is_bottom(stack):
                continue
            top = &elements[self.nodes[stack].element]
            if is_token_element(top):
                continue
            if match_char(top, cp, &after):
                next_stack = self.nodes[stack].parent
                if not is_end_of_sequence(after):
                    next_stack = self.push(next_stack, <position_t>(after - elements))
                self.advance_stack(next_stack, self.step_stacks)
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

    cdef int element_info(self, position_t pos) except -1 nogil:
        """Summarize the character class at pos once: its ASCII members, and whether membership is
        the same for every code point >= 0x80 (and which) and it takes every partial character."""
        cdef const grammar_element* elements = self.rules.elements.data()
        cdef const grammar_element* after
        cdef uint64_t lo = 0, hi = 0
        cdef uint32_t cp
        cdef uint8_t flags = ELEMENT_KNOWN
        cdef bint member
        if self.element_flags[pos] & ELEMENT_KNOWN:
            return 0
        for cp in range(64):
            if match_char(&elements[pos], cp, &after):
                lo |= (<uint64_t>1) << cp
            if match_char(&elements[pos], cp + 64, &after):
                hi |= (<uint64_t>1) << cp
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
        cdef uint64_t pattern[128]
        cdef uint64_t distinct[128]
        cdef int32_t distinct_count[128]
        cdef uint32_t distinct_cp[128]
        cdef int32_t n_tops = 0, n_distinct = 0, best = -1, successor = -1, d, j
        cdef uint64_t bits, matches_above = 0, ascii_lo = 0, ascii_hi = 0
        cdef uint32_t cp
        cdef uint8_t flags
        cdef bint constant = True
        cdef int64_t k
        cdef int half
        cdef node_t stack
        self.summaries[set_id].flags |= SET_CLASS_KNOWN
        for k in range(self.set_start[set_id], self.set_start[set_id + 1]):
            stack = self.set_nodes[k]
            if is_bottom(stack) or is_token_element(&self.rules.elements[self.nodes[stack].element]):
                continue
            if n_tops == 64:
                return 0  # too many stacks to group by: no class, the walk goes node by node
            tops[n_tops] = self.nodes[stack].element
            n_tops += 1
        memset(pattern, 0, sizeof(pattern))
        for j in range(n_tops):
            self.element_info(tops[j])
            flags = self.element_flags[tops[j]]
            if flags & ELEMENT_ALL_PARTIALS:
                self.summaries[set_id].flags |= SET_ALL_PARTIALS
            if not (flags & ELEMENT_CONSTANT_ABOVE):
                constant = False
            elif flags & ELEMENT_MEMBER_ABOVE:
                matches_above |= (<uint64_t>1) << j
            for half in range(2):
                bits = self.element_ascii[2 * tops[j] + half]
                while bits:
                    pattern[64 * half + ctz64(bits)] |= (<uint64_t>1) << j
                    bits &= bits - 1
        for cp in range(128):
            if pattern[cp] == 0:
                continue
            d = 0
            while d < n_distinct and distinct[d] != pattern[cp]:
                d += 1
            if d == n_distinct:
                distinct[d] = pattern[cp]
                distinct_count[d] = 0
                distinct_cp[d] = cp
                n_distinct += 1
            distinct_count[d] += 1
            if best < 0 or distinct_count[d] > distinct_count[best]:
                best = d
        if best >= 0:
            successor = self.transition(set_id, distinct_cp[best])
            if successor >= 0:
                for cp in range(128):
                    if pattern[cp] == distinct[best]:
                        if cp < 64:
                            ascii_lo |= (<uint64_t>1) << cp
                        else:
                            ascii_hi |= (<uint64_t>1) << (cp - 64)
        if successor < 0 and constant and matches_above != 0:
            successor = self.transition(set_id, 0x80)
        if successor < 0:
            return 0
        self.summaries[set_id].successor = successor
        self.summaries[set_id].class_ascii[0] = ascii_lo
        self.summaries[set_id].class_ascii[1] = ascii_hi
        if constant and matches_above != 0:
            # every code point >= 0x80 matches the same stacks, so 0x80 stands for them all
            if self.transition(set_id, 0x80) == successor:
                self.summaries[set_id].flags |= SET_CLASS_NON_ASCII
        return 0

    cdef bint set_accepts_partial(self, int32_t set_id, partial_utf8 partial) except -1 nogil:
        """Whether some stack of the set takes an unfinished character (match_partial_char)."""
        cdef const grammar_element* elements = self.rules.elements.data()
        cdef const grammar_element* top
        cdef node_t stack
        cdef int64_t k
        cdef uint8_t mode = self.summaries[set_id].partial_mode, flags
        if partial.n_remain < 0 or (partial.n_remain == 1 and partial.value < 2):
            return False   # invalid, or an overlong 2-byte lead: match_partial_char never holds
        if mode == PARTIAL_UNKNOWN:
            # Most sets take every partial character (a negated class of ASCII exclusions) or none
            # (ASCII classes): decided once from the classes on top.
            mode = PARTIAL_NONE
            for k in range(self.set_start[set_id], self.set_start[set_id + 1]):
                stack = self.set_nodes[k]
                if is_bottom(stack) or is_token_element(&elements[self.nodes[stack].element]):
                    continue
                self.element_info(self.nodes[stack].element)
                flags = self.element_flags[self.nodes[stack].element]
                if flags & ELEMENT_ALL_PARTIALS:
                    mode = PARTIAL_ALL
                    break
                if not ((flags & ELEMENT_CONSTANT_ABOVE) and not (flags & ELEMENT_MEMBER_ABOVE)):
                    mode = PARTIAL_MIXED
            self.summaries[set_id].partial_mode = mode
        if mode == PARTIAL_ALL:
            return True
        if mode == PARTIAL_NONE:
            return False
        for k in range(self.set_start[set_id], self.set_start[set_id + 1]):
            stack = self.set_nodes[k]
            if is_bottom(stack):
                continue
            top = &elements[self.nodes[stack].element]
            if not is_token_element(top) and match_partial_char(top, partial):
                return True
        return False

    cdef int trie_visit(self, const trie_view* trie, int32_t node, int32_t set_id, walk_state* walk) except -1 nogil:
        """Mark (in position_bits) the tokens below a trie node that the stack set accepts.

        The set holds the stacks after the node's code points. A token ends here
        accepted if it ends on a whole character, or if a stack could take the
        rest of its last character; a token terminal on a stack accepts by id
        whatever text remains; a child subtree is entered with the set that its
        code point leads to, or taken whole when every code point below it leads
        back to that same set and every token in it ends on a whole character.
        """
        cdef const grammar_element* elements = self.rules.elements.data()
        cdef const grammar_element* top
        cdef uint64_t* bits = self.position_bits.data()
        cdef int64_t lo = trie.token_lo[node]
        self.visited_nodes += 1
        self.work += 1
        if self.work > self.work_limit:
            with gil:
                raise GrammarError(f"fast path: the mask exceeds its work budget of {self.fast_work_budget} "
                                   "steps (FAST_WORK_BUDGET)")
        cdef int64_t first_longer = lo + trie.n_ending[node]
        cdef int64_t hi = trie.token_hi[node]
        cdef int64_t position, k, i, range_end
        cdef int32_t first_child, last_child
        cdef bint use_blocks, accepted
        cdef node_t stack
        cdef int64_t run_end
        cdef partial_utf8 partial
        if walk.collect_pops and (self.summaries[set_id].flags & SET_HAS_BASE):
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
                accepted = self.set_accepts_partial(set_id, partial)
            if accepted:
                set_position_range(bits, position, run_end)
                self.n_marked += run_end - position
            position = run_end
        if first_longer < hi:
            for k in range(self.set_start[set_id], self.set_start[set_id + 1]):
                stack = self.set_nodes[k]
                if is_bottom(stack):
                    continue
                top = &elements[self.nodes[stack].element]
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
        if self.summaries[set_id].viable_start == VIABLE_UNKNOWN:
            self.compute_viable(set_id)
        if last_child - first_child >= 8 and not (self.summaries[set_id].flags & SET_CLASS_KNOWN):
            self.compute_loop(set_id)
        # The non-ASCII children sort last; when the set loops on every one of them, take them all at once.
        if (self.summaries[set_id].flags & SET_CLASS_KNOWN) and (self.summaries[set_id].flags & SET_CLASS_NON_ASCII) and \
                trie.first_non_ascii[node] < last_child and \
                self.chain_accepts(set_id, trie.non_ascii_ascii[2 * node], trie.non_ascii_ascii[2 * node + 1],
                                   trie.non_ascii_flags[node], trie.non_ascii_depth[node]):
            set_position_range(bits, trie.token_lo[trie.children[trie.first_non_ascii[node]]], hi)
            self.n_marked += hi - trie.token_lo[trie.children[trie.first_non_ascii[node]]]
            last_child = trie.first_non_ascii[node]
        use_blocks = (self.summaries[set_id].flags & SET_CLASS_KNOWN) and (
            self.summaries[set_id].class_ascii[0] or self.summaries[set_id].class_ascii[1] or (self.summaries[set_id].flags & SET_CLASS_NON_ASCII))
        k = self.summaries[set_id].viable_start
        while k < self.summaries[set_id].viable_start + 2 * self.summaries[set_id].viable_count:
            # the children whose code point lies in [viable_bounds[k], viable_bounds[k + 1]]
            i = lower_bound(trie.child_cp + first_child, trie.child_cp + last_child,
                            self.viable_bounds[k]) - trie.child_cp
            range_end = upper_bound(trie.child_cp + i, trie.child_cp + last_child,
                                    self.viable_bounds[k + 1]) - trie.child_cp
            while i < range_end:
                # A whole block of children whose code points, and everything below them,
                # lead back to the set is taken at once.
                if use_blocks and i % CHILD_BLOCK == 0 and i + CHILD_BLOCK <= range_end and self.chain_accepts(
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

    cdef bint chain_accepts(self, int32_t set_id, uint64_t ascii_lo, uint64_t ascii_hi, uint8_t flags,
                            int32_t depth) except -1 nogil:
        """Whether every token of a subtree with this summary is accepted from the set: following the
        successors for as many code points as the deepest token takes, every code point stays in the
        class of the set it meets, and every partial character it ends in is one that set takes."""
        cdef int32_t d = 0, successor
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
                    or (ascii_hi & ~self.summaries[set_id].class_ascii[1]) != 0 \
                    or ((flags & SUBTREE_NON_ASCII) and not (self.summaries[set_id].flags & SET_CLASS_NON_ASCII)):
                return False
            if successor == set_id:
                return True  # a loop: every deeper code point meets this same set
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
        them (run_end, NO_SET if none). Explored no deeper than the longest token needs."""
        cdef int32_t s = set_id, successor, c
        cdef int64_t i, length
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
            else:
                self.summaries[c].run_length = 1
                self.summaries[c].run_end = successor
        return 0

    cdef int visit_child(self, const trie_view* trie, int32_t child, int32_t set_id, walk_state* walk) except -1 nogil:
        cdef uint64_t* bits = self.position_bits.data()
        cdef uint32_t cp = trie.node_cp[child]
        cdef int32_t next_set
        if (self.summaries[set_id].flags & SET_CLASS_KNOWN) and self.summaries[set_id].successor >= 0 and (
                (cp < 64 and (self.summaries[set_id].class_ascii[0] >> cp) & 1)
                or (64 <= cp < 128 and (self.summaries[set_id].class_ascii[1] >> (cp - 64)) & 1)
                or (cp >= 128 and (self.summaries[set_id].flags & SET_CLASS_NON_ASCII))):
            next_set = self.summaries[set_id].successor
        else:
            next_set = self.transition(set_id, cp)
            if next_set < 0:
                return 0
        if not (trie.below_flags[child] & SUBTREE_OVERLONG_END) and (
                (self.summaries[next_set].flags & SET_CLASS_KNOWN) or trie.node_end[child] - child >= LOOP_TEST_MIN_NODES):
            if self.chain_accepts(next_set, trie.below_ascii[2 * child], trie.below_ascii[2 * child + 1],
                                  trie.below_flags[child], trie.below_depth[child]):
                set_position_range(bits, trie.token_lo[child], trie.token_hi[child])
                self.n_marked += trie.token_hi[child] - trie.token_lo[child]
                return 0
        self.trie_visit(trie, child, next_set, walk)
        return 0

    cdef int compute_viable(self, int32_t set_id) except -1 nogil:
        """The code points some stack of the set can take next, as sorted disjoint intervals."""
        cdef const grammar_element* elements = self.rules.elements.data()
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
            pos = &elements[self.nodes[stack].element]
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
        cdef int32_t set_id = self.intern_set(current)
        cdef int64_t width = (trie.n_vocab + 31) >> 5
        cdef int64_t slot, k
        cdef token_t token
        cdef bint allow_eog = False, completed
        it = self.mask_slot.find(set_id)
        if it != self.mask_slot.end():
            slot = deref(it).second
            memcpy(out, self.mask_chunks[slot // MASKS_PER_CHUNK].data() + (slot % MASKS_PER_CHUNK) * width,
                   width * sizeof(uint32_t))
            self.cached_masks += 1
            return 0
        if self.fast_failed.count(set_id):
            return 1
        self.fast_masks += 1
        self.ensure_position_bits()
        completed = False
        self.work = 0
        self.work_limit = self.fast_work_budget
        try:
            if self.use_segments:
                self.segment_mask(set_id, trie, out)
            else:
                self.walk_mask(set_id, trie, out)
            completed = True
        finally:
            self.work_limit = NO_WORK_LIMIT
            if completed and self.work > self.max_fast_work:
                self.max_fast_work = self.work
            if not completed:
                # (a GrammarError mid-walk, a bound of the fast path: position_bits must be all zero again
                # for the next walk, and this set's masks come from the reference path from now on)
                memset(self.position_bits.data(), 0, self.position_bits.size() * sizeof(uint64_t))
                self.n_marked = 0
                self.fast_failed.insert(set_id)
                self.fallback_masks += 1
        for k in range(self.set_start[set_id], self.set_start[set_id + 1]):
            if self.set_nodes[k] == EMPTY_STACK:
                allow_eog = True
        if allow_eog:
            for k in range(<int64_t>self.eog_tokens.size()):
                token = self.eog_tokens[k]
                set_token_bit(out, token)
        if self.use_segments and self.compose_cost <= width:
            # composed from the segment cache about as fast as copied back from the mask cache (and
            # copying it in, to memory long out of the processor's caches, would cost more)
            return 0
        # Masks live in fixed-size chunks, so storing one never moves the others.
        if (<size_t>(self.n_cached_masks + 1) * width * sizeof(uint32_t)) > MAX_MASK_CACHE_BYTES:
            self.clear_masks()
        slot = self.n_cached_masks
        if slot // MASKS_PER_CHUNK >= <int64_t>self.mask_chunks.size():
            self.mask_chunks.push_back(vector[uint32_t]())
            take_chunk(self.mask_chunks.back(), MASKS_PER_CHUNK * width)
        self.mask_chunks.back().insert(self.mask_chunks.back().end(), out, out + width)
        self.mask_slot[set_id] = slot
        self.n_cached_masks += 1
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

    # -- the segment cache ----------------------------------------------------------
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
        self.segment_frames.clear()
        self.work += length if length != WHOLE_STACK else 0
        while (length == WHOLE_STACK or n < length) and node != EMPTY_STACK:
            self.work += 1 if length == WHOLE_STACK else 0
            if n >= MAX_WHOLE_SEGMENT_FRAMES:
                # (the caller answers this mask on the reference path)
                with gil:
                    raise GrammarError(f"fast path: a stack deeper than {MAX_WHOLE_SEGMENT_FRAMES} frames "
                                       "(MAX_WHOLE_SEGMENT_FRAMES) as one segment")
            self.segment_frames.push_back(self.canonical[self.nodes[node].element])
            node = self.nodes[node].parent
            n += 1
        below[0] = node
        node = SEGMENT_BASE
        while n > 0:
            n -= 1
            node = self.push(node, self.segment_frames[n])
        segment[0] = node
        self.segment_nodes[key] = pair[node_t, node_t](segment[0], below[0])
        return 0

    cdef int32_t build_entry(self, node_t segment, int32_t length, const trie_view* trie, size_t max_pops) \
            except -2 nogil:
        """Walk the trie from a segment stack and store what it accepts whatever lies below, and where
        its paths pop out (the continuations). NO_ENTRY when it pops out at more than max_pops nodes (or
        above too many nodes in all) to be worth it."""
        cdef walk_state walk = segment_walk(&self.continuations, max_pops)
        cdef vector[node_t] start
        cdef int32_t set_id, entry_id
        cdef int64_t width = (trie.n_vocab + 31) >> 5
        cdef int64_t n_words = <int64_t>self.position_bits.size()
        cdef int64_t offset
        cdef segment_entry entry
        cdef uint64_t hash_value
        cdef bint completed
        start.push_back(segment)
        set_id = self.intern_set(start)
        self.n_marked = 0
        completed = False
        try:
            self.trie_visit(trie, 0, set_id, &walk)
            completed = True
        finally:
            if not completed:
                memset(self.position_bits.data(), 0, n_words * sizeof(uint64_t))
                self.n_marked = 0
        if walk.aborted:
            memset(self.position_bits.data(), 0, n_words * sizeof(uint64_t))
            self.n_marked = 0
            self.segment_walks_grown += 1
            return NO_ENTRY
        entry.length = length
        entry.continuations_start = <int64_t>self.entry_continuations.size()
        entry.n_continuations = <int32_t>self.continuations.size()
        self.entry_continuations.insert(self.entry_continuations.end(), self.continuations.begin(),
                                        self.continuations.end())
        if self.n_marked < width:
            # few tokens: kept as ids (fewer bytes than the dense words)
            entry.tokens_start = <int64_t>self.entry_tokens.size()
            self.drain_subtree(trie, 0, &self.entry_tokens, NULL)
            entry.n_tokens = <int32_t>(<int64_t>self.entry_tokens.size() - entry.tokens_start)
            self.n_marked = 0
        else:
            offset = <int64_t>self.entry_words.size()
            self.entry_words.resize(offset + width)
            self.positions_to_tokens(trie, self.entry_words.data() + offset)
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
        self.segment_entries_built += 1
        return entry_id

    cdef int32_t find_entry(self, node_t stack, const trie_view* trie, node_t* below) except -2 nogil:
        """The segment entry serving a stack, built if no length tried for its top position has one;
        *below is the stack under the segment (-1 when the segment is the whole stack)."""
        cdef position_t top = self.canonical[self.nodes[stack].element]
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
                self.segment_hits += 1
                return deref(it).second
        length = ctz64(lengths) + 1 if lengths else 1
        length = self.skip_transparent(stack, length)
        while True:
            self.segment_of(stack, length, &segment, below)
            it = self.entry_of.find(segment)
            if it != self.entry_of.end():
                self.segment_hits += 1
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
        cdef const grammar_element* elements = self.rules.elements.data()
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
            node = self.nodes[node].parent
            n += 1
        # node is the segment's lowest frame (or the stack ran out)
        while node != EMPTY_STACK and n < MAX_SEGMENT_LENGTH and n > 1 and self.transparent(self.nodes[node].element):
            node = self.nodes[node].parent
            n += 1
        return n

    cdef int32_t context_set(self, node_t below) except -2 nogil:
        """The set the stack under a segment advances to: where popped paths go on."""
        cdef vector[node_t] stacks
        cdef int32_t set_id
        it = self.context_sets.find(below)
        if it != self.context_sets.end():
            return deref(it).second
        self.advance_stack(below, stacks)
        set_id = self.intern_set(stacks)
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
        cdef walk_state walk = segment_walk(&self.continuations, self.continuations_limit)
        context = self.context_set(frame)
        try:
            self.trie_visit(trie, node, context, &walk)
            completed = True
        finally:
            if not completed:
                memset(self.position_bits.data(), 0, self.position_bits.size() * sizeof(uint64_t))
                self.n_marked = 0
        offset = <int64_t>self.entry_tokens.size()
        self.drain_subtree(trie, node, &self.entry_tokens, NULL)
        if walk.aborted or <int64_t>self.entry_tokens.size() - offset > MAX_MEMOIZED_CONTINUATION:
            self.entry_tokens.resize(offset)
            self.continuation_entry_of[key] = NO_ENTRY
            return NO_ENTRY
        entry.length = 1
        entry.tokens_start = offset
        entry.n_tokens = <int32_t>(<int64_t>self.entry_tokens.size() - offset)
        entry.continuations_start = <int64_t>self.entry_continuations.size()
        entry.n_continuations = <int32_t>self.continuations.size()
        self.entry_continuations.insert(self.entry_continuations.end(), self.continuations.begin(),
                                        self.continuations.end())
        entry_id = <int32_t>self.entries.size()
        self.entries.push_back(entry)
        self.continuation_entry_of[key] = entry_id
        self.continuation_entries_built += 1
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
        self.work += 1
        if self.work > self.work_limit:
            with gil:
                raise GrammarError(f"fast path: the mask exceeds its work budget of {self.fast_work_budget} "
                                   "steps (FAST_WORK_BUDGET)")
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
        self.continuation_walks += 1
        context = self.context_set(below)
        self.trie_visit(trie, node, context, &walk)
        offset = <int64_t>self.continuation_tokens.size()
        self.drain_subtree(trie, node, &self.continuation_tokens, out)
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
        self.resolved.clear()
        self.resolved_below.clear()
        memset(out, 0, width * sizeof(uint32_t))
        for k in range(self.set_start[set_id], self.set_start[set_id + 1]):
            stack = self.set_nodes[k]
            if stack == EMPTY_STACK:
                # The empty stack takes only a token whose text is already over at the root (an overlong
                # C0 80 decodes to the terminator) and ends on a whole character.
                for position in range(trie.token_lo[0], trie.token_lo[0] + trie.n_ending[0]):
                    if trie.end_partial[position].n_remain == 0:
                        token = trie.token_at[position]
                        set_token_bit(out, token)
                continue
            entry_id = self.find_entry(stack, trie, &below)
            self.resolved.push_back(entry_id)
            self.resolved_below.push_back(below)
        # What composing this mask again would cost, in token writes (a dense entry's words count a
        # quarter each): the mask cache keeps only masks dearer to compose than to copy back.
        self.compose_cost = 64 * <int64_t>self.resolved.size()
        for k in range(<int64_t>self.resolved.size()):
            entry = self.entries[self.resolved[k]]   # a copy: the continuations below may add entries
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
                if self.resolved[j] == self.resolved[k] and self.resolved_below[j] == self.resolved_below[k]:
                    seen = True
                    break
            if seen:
                continue
            # The answer of all of an entry's continuations under one stack below is kept whole.
            key = (<uint64_t><uint32_t>self.resolved[k] << 32) | <uint32_t>self.resolved_below[k]
            found = self.entry_results.find(key)
            if found != self.entry_results.end():
                self.compose_cost += deref(found).second.second
                for j in range(deref(found).second.first, deref(found).second.first + deref(found).second.second):
                    token = self.continuation_tokens[j]
                    set_token_bit(out, token)
                continue
            self.collected.clear()
            for c in range(entry.n_continuations):
                self.continuation_into(trie, self.entry_continuations[entry.continuations_start + c],
                                       self.resolved_below[k], out, &self.collected, 0)
            self.compose_cost += <int64_t>self.collected.size()
            if <int64_t>self.collected.size() <= MAX_MEMOIZED_CONTINUATION:
                self.entry_results[key] = pair[int64_t, int32_t](<int64_t>self.continuation_tokens.size(),
                                                                 <int32_t>self.collected.size())
                self.continuation_tokens.insert(self.continuation_tokens.end(), self.collected.begin(),
                                                self.collected.end())
        self.n_marked = 0
        return 0


def _nullable_rules(Rules rules):
    """Per rule id, whether the rule can match the empty string: the least fixpoint, by a worklist
    (parser.nullable_rules over the flat elements), so linear in the grammar's size."""
    cdef const grammar_element* elements = rules.elements.data()
    cdef size_t n_rules = rules.rule_start.size()
    cdef vector[uint8_t] nullable
    cdef vector[vector[int32_t]] waiting
    cdef vector[int32_t] alternative_rule, alternative_pending, queue, refs
    cdef bint blocked
    cdef size_t rule_id, k
    cdef int32_t alternative, index
    cdef position_t pos
    nullable.assign(n_rules, 0)
    waiting.resize(n_rules)
    for rule_id in range(n_rules):
        pos = rules.rule_start[rule_id]
        refs.clear()
        blocked = False
        while True:
            if is_end_of_sequence(&elements[pos]):
                if not blocked:
                    if refs.empty():
                        if not nullable[rule_id]:
                            nullable[rule_id] = 1
                            queue.push_back(<int32_t>rule_id)
                    else:
                        alternative = <int32_t>alternative_rule.size()
                        alternative_rule.push_back(<int32_t>rule_id)
                        alternative_pending.push_back(<int32_t>refs.size())
                        for k in range(refs.size()):
                            waiting[refs[k]].push_back(alternative)
                refs.clear()
                blocked = False
                if elements[pos].type == LLAMA_GRETYPE_END:
                    break
            elif elements[pos].type == LLAMA_GRETYPE_RULE_REF:
                refs.push_back(<int32_t>elements[pos].value)
            else:
                blocked = True
            pos += 1
    while not queue.empty():
        index = queue.back()
        queue.pop_back()
        for k in range(waiting[index].size()):
            alternative = waiting[index][k]
            alternative_pending[alternative] -= 1
            if alternative_pending[alternative] == 0 and not nullable[alternative_rule[alternative]]:
                nullable[alternative_rule[alternative]] = 1
                queue.push_back(alternative_rule[alternative])
    return nullable


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


def _repetition_chains(Rules rules):
    """The chains llama.cpp writes for x{m,n}: n - m nested rules R_k ::= x R_(k-1) | down to
    R_0 ::= x |, each x taking at least one character. Returns {rule: (k, R_(k-1))} for the rules
    R_1 .. R_(n-m-1) of every such chain (R_0, with nothing after x, is left out)."""
    nullable = _nullable_rules(rules)
    bases = {}   # rule -> x, for R ::= x |
    steps = {}   # rule -> (x, next rule), for R ::= x next |
    for rule_id, elements in enumerate(rules.rules):
        alternatives, current = [], []
        for kind, value in elements:
            if kind == LLAMA_GRETYPE_ALT or kind == LLAMA_GRETYPE_END:
                alternatives.append(tuple(current))
                current = []
            else:
                current.append((kind, value))
        if len(alternatives) != 2 or alternatives[1] or not alternatives[0]:
            continue
        body = alternatives[0]
        if not all(kind == LLAMA_GRETYPE_RULE_REF and nullable[value] for kind, value in body):
            bases[rule_id] = body
        last_kind, last_value = body[len(body) - 1]
        x = body[:len(body) - 1]
        if last_kind == LLAMA_GRETYPE_RULE_REF and last_value != rule_id and x and \
                not all(kind == LLAMA_GRETYPE_RULE_REF and nullable[value] for kind, value in x):
            steps[rule_id] = (x, last_value)
    depth = {}
    for rule_id in steps:
        path = []
        r = rule_id
        while r in steps and r not in depth and r not in path:
            path.append(r)
            r = steps[r][1]
        for r in reversed(path):
            x, following = steps[r]
            if following in steps and steps[following][0] == x and depth.get(following, -1) >= 0:
                depth[r] = depth[following] + 1
            elif following in bases and bases[following] == x:
                depth[r] = 1
            else:
                depth[r] = -1
    return {r: (d, steps[r][1]) for r, d in depth.items() if d > 0}


def _repetition_canonical(Rules rules, dict chains, int32_t limit):
    """Per element position, the position a segment key uses for it: the same offset in the chain
    rule `limit` steps from the chain's end, when the position's rule lies further out.

    A frame in R_k (see _repetition_chains), with k + 1 x's still allowed, behaves like the frame in
    R_j for all j, k >= limit as long as no more than `limit` x's can be taken, which holds within one
    token when each x takes at least one code point and limit exceeds the longest token: such frames
    share one segment entry.
    """
    cdef vector[position_t] canonical
    cdef Py_ssize_t i, start, target_start
    canonical.resize(rules.elements.size())
    for i in range(<Py_ssize_t>rules.elements.size()):
        canonical[i] = <position_t>i
    inner = {following for _, following in chains.values()}
    target_of = {}
    for top in chains:
        if top in inner:
            continue
        path = []   # from the chain's outermost rule down to the one `limit` steps from the end
        r = top
        while r in chains and chains[r][0] > limit:
            path.append(r)
            r = chains[r][1]
        for rule_id in path:
            target_of[rule_id] = r   # every rule on the way is a step of the same chain
    for rule_id, target in target_of.items():
        start, target_start = rules.rule_start[rule_id], rules.rule_start[target]
        i = 0
        while True:
            canonical[start + i] = <position_t>(target_start + i)
            if rules.elements[start + i].type == LLAMA_GRETYPE_END:
                break
            i += 1
    return canonical


def _context_for(Rules rules, vocab, size_t max_stacks, double precompute):
    """The context new matchers of (rules, vocab) join: shared, until its node pool passes a budget.
    A new context builds its segment cache ahead of use for up to `precompute` seconds."""
    key = (id(vocab), max_stacks)
    cdef MatchContext ctx = rules.contexts.get(key)
    if ctx is None or ctx.vocab is not vocab or ctx.nodes.size() > CONTEXT_NODE_BUDGET:
        ctx = MatchContext(rules, vocab, max_stacks)
        ctx.precompute(precompute)
        rules.contexts[key] = ctx
    return ctx


def _check_token_ids(Rules rules, int64_t n_vocab):
    """A token terminal naming an id outside the vocabulary: llama.cpp takes it, and then no token ever
    matches <[id]> (the grammar dies there, and its sampler aborts) and every one matches !<[id]>."""
    cdef size_t i
    for i in range(rules.elements.size()):
        if (rules.elements[i].type == LLAMA_GRETYPE_TOKEN or rules.elements[i].type == LLAMA_GRETYPE_TOKEN_NOT) \
                and rules.elements[i].value >= <uint64_t>n_vocab:
            raise GrammarError(f"token id {rules.elements[i].value} is outside the vocabulary [0, {n_vocab})")


def _token_id(value, what="token id"):
    """An int (or numpy integer) token id; anything else is refused, not coerced."""
    if type(value) is int:
        return value
    if isinstance(value, (bool, np.bool_)) or not hasattr(type(value), "__index__"):
        raise TypeError(f"{what} must be an int, got {type(value).__name__} {value!r}")
    return operator.index(value)


def _as_rules(rules, vocab, root):
    if isinstance(rules, Rules):
        return rules
    if isinstance(rules, (str, bytes)):
        return Rules.parse(rules, root=root, vocab=vocab)
    raise TypeError(f"rules must be Rules or GBNF text, got {type(rules).__name__}")


def _trigger_words_pattern(words):
    # llama.cpp builds one pattern from trigger words, escaping regex metacharacters.
    escaped = "|".join(re.sub(r"[.^$|()*+?\[\]{}\\]", lambda m: "\\" + m.group(0), w) for w in words)
    return "[\\s\\S]*?(" + escaped + ")[\\s\\S]*"


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
                 trigger_words=(), lazy=None, max_stacks=DEFAULT_MAX_STACKS, precompute=DEFAULT_PRECOMPUTE_SECONDS):
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
        self.rules = parsed
        self.vocab = vocab
        self.ctx = _context_for(parsed, vocab, int(max_stacks), float(precompute))
        self.decoded = self.ctx.decoded
        self.partial.value = 0
        self.partial.n_remain = 0
        self.trigger_tokens = tuple(int(t) for t in trigger_tokens)
        trigger_patterns = tuple(trigger_patterns)
        if trigger_words:
            if trigger_patterns:
                raise ValueError("give trigger_words or trigger_patterns, not both")
            trigger_patterns = (_trigger_words_pattern(trigger_words),)
        self.trigger_patterns = trigger_patterns
        try:
            self.trigger_regexes = [re.compile(_ecmascript_to_python(p.encode("utf-8") if isinstance(p, str) else p))
                                    for p in trigger_patterns]
        except re.error as err:
            raise GrammarError(f"invalid trigger pattern: {err}") from None
        if lazy is None:
            lazy = bool(self.trigger_tokens or self.trigger_patterns)
        self.lazy = bool(lazy)
        self.awaiting_trigger = self.lazy
        self.trigger_bytes = bytearray()
        self.trigger_buffer_positions = []
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
        cdef const token_t[::1] id_view = ids
        cdef vector[grammar_candidate] rejects
        cdef int64_t n = ids.shape[0]
        cdef cnp.ndarray out
        cdef int64_t[::1] out_view
        cdef size_t k
        cdef vocab_view vocab = self.decoded.view()
        cdef MatchContext ctx = self.ctx
        if n == 0:
            return np.empty(0, dtype=np.int64)
        self.enter()
        try:
            with nogil:
                ctx.reject_tokens(self.active_stacks, self.partial, &vocab, &id_view[0], n, rejects, whole_mask)
        finally:
            self.leave()
        out = np.empty(rejects.size(), dtype=np.int64)
        out_view = out
        for k in range(rejects.size()):
            out_view[k] = rejects[k].index
        return out

    def _all_ids(self):
        return np.arange(self.decoded.n_vocab, dtype=np.int32)

    def _check_ids(self, ids, what="ids"):
        ids = np.asarray(ids)
        if ids.ndim != 1 or ids.dtype.kind not in "iu":
            raise ValueError(f"Invalid {what}: expected a 1-D integer array, got {ids.dtype} of shape {ids.shape}")
        if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= self.decoded.n_vocab):
            raise ValueError(f"Invalid {what}: token ids must lie in [0, {self.decoded.n_vocab}), "
                             f"got range [{int(ids.min())}, {int(ids.max())}]")
        return np.ascontiguousarray(ids, dtype=np.int32)

    cdef bint fast_into(self, uint32_t* out) except -1:
        """The fast path's mask into out (the caller holds the matcher's lock); False when this state is
        answered on the reference path instead (the fast path ran past one of its bounds)."""
        cdef MatchContext ctx = self.ctx
        cdef int status = 1
        try:
            with nogil:
                status = ctx.mask_into(self.active_stacks, out)
        except GrammarError:
            return False
        return status == 0

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
        cdef cnp.ndarray words = np.zeros(width, dtype=np.uint32)
        cdef uint32_t[::1] view = words
        if self.awaiting_trigger:
            words[:] = 0xFFFFFFFF
            if n_vocab % 32:
                words[width - 1] = (1 << (n_vocab % 32)) - 1
            return words
        if not reference and self.partial.n_remain <= 0:
            if self.fast_into(&view[0]):
                return words
            reference = True  # past a bound of the fast path: llama.cpp's own way gives the mask
        if not reference and self.partial.n_remain > 0:
            # Inside a character only a piece that opens with a continuation byte can decode (any other
            # leaves llama.cpp's decoder an invalid sequence, rejected by every stack), and an
            # end-of-generation token is decided by the stacks: check just those, one by one.
            candidates = self.decoded.continuation_candidates()
            allowed = np.zeros(width * 32, dtype=bool)
            allowed[candidates] = True
            allowed[candidates[self._rejected_indices(candidates, True)]] = False
            return np.packbits(allowed, bitorder="little").view(np.uint32)
        allowed = np.ones(width * 32, dtype=bool)
        allowed[n_vocab:] = False
        allowed[self._rejected_indices(self._all_ids(), True)] = False
        return np.packbits(allowed, bitorder="little").view(np.uint32)

    def apply(self, logits):
        """Set the logits of every token llama.cpp's grammar sampler rejects to -inf, in place.

        logits: float32, C-contiguous, shape (n_vocab,).
        """
        cdef float[::1] values
        cdef const uint32_t[::1] bits
        cdef int64_t i, n
        self._require_vocab()
        _check_logits(logits, self.decoded.n_vocab)
        if self.awaiting_trigger:
            return logits
        bits = self._mask_words()
        values = logits
        n = values.shape[0]
        with nogil:
            for i in range(n):
                if not (bits[i >> 5] >> (i & 31)) & 1:
                    values[i] = -INFINITY
        return logits

    def apply_candidates(self, ids, logits):
        """llama_sampler_apply on a candidate list: logits[i] = -inf where ids[i] is rejected."""
        self._require_vocab()
        ids = self._check_ids(ids)
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
        """Fill an int32 bitmask (bit set = allowed) of shape ((n_vocab + 31) // 32,) or (batch, that)."""
        cdef uint32_t[::1] row_view
        cdef trie_view trie
        cdef MatchContext ctx = self.ctx
        self._require_vocab()
        n_vocab = self.decoded.n_vocab
        width = (n_vocab + 31) // 32
        if not isinstance(bitmask, np.ndarray) or bitmask.dtype != np.int32 or bitmask.ndim not in (1, 2) \
                or bitmask.shape[bitmask.ndim - 1] != width or not bitmask.flags.c_contiguous \
                or not bitmask.flags.writeable:
            raise ValueError(
                f"Invalid bitmask: expected writable C-contiguous int32 of shape ({width},) or (batch, {width}), "
                f"got {getattr(bitmask, 'dtype', type(bitmask).__name__)} of shape {getattr(bitmask, 'shape', None)}")
        row = bitmask if bitmask.ndim == 1 else bitmask[index]
        self.enter()
        try:
            if not self.awaiting_trigger and self.partial.n_remain <= 0:
                row_view = row.view(np.uint32)
                if not self.fast_into(&row_view[0]):
                    row[:] = self._mask_words_locked(True).view(np.int32)
            else:
                row[:] = self._mask_words_locked(False).view(np.int32)
        finally:
            self.leave()
        return bitmask

    def allows(self, token_id):
        """Whether llama.cpp's grammar sampler leaves this token's logit finite."""
        self._require_vocab()
        ids = self._check_ids(np.array([_token_id(token_id)], dtype=np.int64), "token id")
        self.enter()
        try:
            if self.awaiting_trigger:
                return True
            return self._rejected_indices(ids).shape[0] == 0
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
        self._commit_token(token, bytes(piece))

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
        self.enter()
        try:
            current = self.active_stacks
            with nogil:
                partial = decode_utf8(raw, size, self.partial, code_points)
                ctx.accept_text(current, code_points.data(), code_points.size() - 1)
            if current.empty():
                raise GrammarError(
                    f"Unexpected empty grammar stack after accepting piece: {raw_bytes.decode('utf-8', 'replace')}")
            self.active_stacks.swap(current)
            self.partial = partial
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
        piece = self.vocab.piece(token)
        self.enter()
        try:
            if self.awaiting_trigger:
                self._accept_awaiting(token, piece)
                return
            if self.decoded.is_eog[token]:
                if not self.complete:
                    raise GrammarError(f"end-of-generation token {token} accepted while the grammar is not "
                                       "complete (llama.cpp aborts here)")
                return
            self._commit_token(token, piece)
        finally:
            self.leave()

    def _accept_awaiting(self, token, piece):
        if token in self.trigger_tokens:
            snapshot = self._snapshot()
            self.awaiting_trigger = False
            self.trigger_bytes = bytearray()
            try:
                self._commit_token(token, piece)
            except GrammarError:
                self._restore(snapshot)
                raise
            return
        start_of_piece = len(self.trigger_bytes)
        self.trigger_buffer_positions.append((token, start_of_piece, start_of_piece + len(piece)))
        self.trigger_bytes += piece
        buffer = bytes(self.trigger_bytes)
        for regex, pattern in zip(self.trigger_regexes, self.trigger_patterns):
            start = _trigger_start(regex, pattern, buffer)
            if start is None:
                continue
            snapshot = self._snapshot()
            self.awaiting_trigger = False
            try:
                for tok, tok_start, tok_end in self.trigger_buffer_positions:
                    if tok_end <= start:
                        continue
                    self._commit_token(tok, buffer[max(tok_start, start):tok_end])
            except GrammarError:
                self._restore(snapshot)
                self.trigger_buffer_positions.pop()
                del self.trigger_bytes[start_of_piece:]
                raise
            self.trigger_bytes = bytearray()
            self.trigger_buffer_positions = []
            return

    def _snapshot(self):
        return (list(self.active_stacks), self.partial.value, self.partial.n_remain, self.awaiting_trigger,
                bytearray(self.trigger_bytes), list(self.trigger_buffer_positions))

    def _restore(self, snapshot):
        stacks, value, n_remain, awaiting, trigger_bytes, positions = snapshot
        self.active_stacks = stacks
        self.partial.value = value
        self.partial.n_remain = n_remain
        self.awaiting_trigger = awaiting
        self.trigger_bytes = trigger_bytes
        self.trigger_buffer_positions = positions

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
        return bytes(self.trigger_bytes)

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
        other.trigger_bytes = bytearray(self.trigger_bytes)
        other.trigger_buffer_positions = list(self.trigger_buffer_positions)
        other.trigger_tokens = self.trigger_tokens
        other.trigger_patterns = self.trigger_patterns
        other.trigger_regexes = self.trigger_regexes

    def reset(self):
        """Back to the state of a fresh matcher (llama_sampler_reset on the grammar sampler)."""
        self.enter()
        try:
            self.partial.value = 0
            self.partial.n_remain = 0
            self.awaiting_trigger = self.lazy
            self.trigger_bytes = bytearray()
            self.trigger_buffer_positions = []
            self._init_stacks()
        finally:
            self.leave()

    def __repr__(self):
        return (f"<Grammar: {self.active_stacks.size()} stacks, complete={self.complete}, "
                f"awaiting_trigger={self.awaiting_trigger}>")


def _ecmascript_to_python(bytes pattern):
    """Rewrite the two constructs whose meaning differs between std::regex (ECMAScript, no multiline)
    and Python's re: `$` matches only at the very end, and `.` matches neither \\n nor \\r."""
    out = bytearray()
    i = 0
    n = len(pattern)
    in_class = False
    while i < n:
        c = pattern[i]
        if c == 0x5C and i + 1 < n:  # backslash: copy the escape as it is
            out += pattern[i:i + 2]
            i += 2
            continue
        if in_class:
            if c == 0x5D:  # ]
                in_class = False
            out.append(c)
        elif c == 0x5B:  # [
            if pattern[i:i + 2] == b"[]":  # ECMAScript's empty class matches nothing
                out += b"(?!)"
                i += 2
                continue
            if pattern[i:i + 3] == b"[^]":  # and its negation matches anything
                out += b"[\\s\\S]"
                i += 3
                continue
            in_class = True
            out.append(c)
            if i + 1 < n and pattern[i + 1] == 0x5E:  # [^
                out.append(0x5E)
                i += 1
        elif c == 0x2E:  # .
            out += b"[^\\n\\r]"
        elif c == 0x24:  # $
            out += b"\\Z"
        else:
            out.append(c)
        i += 1
    return bytes(out)


def _trigger_start(regex, pattern, bytes buffer):
    """llama_grammar_trigger_pattern::find: where the constrained text starts, or None."""
    match = None
    if isinstance(pattern, str):
        pattern = pattern.encode("utf-8")
    if pattern.startswith(b"^") and pattern.endswith(b"$"):
        match = regex.fullmatch(buffer)
    if match is None:
        match = regex.search(buffer)
    if match is None:
        return None
    for group in range(1, (regex.groups or 0) + 1):
        if match.start(group) >= 0 and match.end(group) > match.start(group):
            return match.start(group)
    return match.start(0)


def _check_logits(logits, expected):
    if not isinstance(logits, np.ndarray) or logits.dtype != np.float32 or logits.shape != (expected,) \
            or not logits.flags.writeable or not logits.flags.c_contiguous:
        raise ValueError(
            f"Invalid logits: expected writable C-contiguous float32 of shape ({expected},), got "
            f"{getattr(logits, 'dtype', type(logits).__name__)} of shape {getattr(logits, 'shape', None)}"
            + ("" if not isinstance(logits, np.ndarray) or logits.flags.c_contiguous else ", not contiguous"))


_batch_pool = None


def fill_next_token_bitmasks(grammars, bitmask, max_workers=None):
    """Fill row i of a (len(grammars), (n_vocab + 31) // 32) int32 bitmask for grammars[i], across threads.

    Each mask runs without the GIL, so rows fill in parallel (matchers that share a
    MatchContext take turns on its lock). Returns the bitmask.
    """
    global _batch_pool
    grammars = list(grammars)
    if not isinstance(bitmask, np.ndarray) or bitmask.ndim != 2 or bitmask.shape[0] < len(grammars):
        raise ValueError(f"Invalid bitmask: expected int32 of shape ({len(grammars)}, width), got "
                         f"{getattr(bitmask, 'dtype', type(bitmask).__name__)} of shape {getattr(bitmask, 'shape', None)}")
    for grammar in grammars:
        if not isinstance(grammar, Grammar):
            raise TypeError(f"expected Grammar matchers, got {type(grammar).__name__}")
    if len(grammars) <= 1 or max_workers == 1:
        for index, grammar in enumerate(grammars):
            grammar.fill_next_token_bitmask(bitmask, index)
        return bitmask
    if _batch_pool is None:
        import concurrent.futures
        import os
        _batch_pool = concurrent.futures.ThreadPoolExecutor(max_workers=max_workers or os.cpu_count() or 2,
                                                            thread_name_prefix="bankml-mask")
    futures = [_batch_pool.submit(grammar.fill_next_token_bitmask, bitmask, index)
               for index, grammar in enumerate(grammars)]
    for future in futures:
        future.result()
    return bitmask
