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
per-vocabulary decoded code points. It must not parse text (_rules and its _gbnf.pxi do)
nor read vocabulary files (vocab.py does).
"""
import bisect
import collections
import heapq
import operator
import os
import re
import threading
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
from bankml._charclass cimport (MAX_CODE_POINT, class_accepts_all_partials, class_constant_from, class_intervals, is_end_of_sequence,
                                is_token_element, match_char, match_partial_char, match_token)
from bankml._rules cimport make_rules, rules_may_be_empty, rules_nullable

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
# How long (seconds of its own thread's time) the first matcher of a (Rules, Vocab) spends building the
# segment cache ahead of use, in a background thread (the first mask does not wait for it); what is not
# built by then is built on first use.
DEFAULT_PRECOMPUTE_SECONDS = 0.03
# How many accepted steps a matcher can roll back by default: vLLM rolls back its draft tokens (at most
# num_speculative_tokens), SGLang's jump-forward the retokenized tail (its XGrammar backend keeps 200).
# A step costs a copy of the stack ids (a few integers), so the ring is cheap.
DEFAULT_MAX_ROLLBACK = 200
# The most bytes jump_forward() returns (a grammar such as `root ::= "a" root` forces text forever).
DEFAULT_MAX_JUMP_FORWARD_BYTES = 4096

# history_flags bits: what a rolled-back state had besides its stacks and partial character
cdef enum:
    HISTORY_AWAITING = 1        # the lazy grammar was waiting for its trigger
    HISTORY_EOG = 2             # an end-of-generation token had been accepted
# The background build lets other threads have the GIL every this many steps of its Python planning.
cdef int PLANNING_STEPS_PER_YIELD = 256
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


cdef inline walk_state segment_walk(vector[int32_t]* pops, size_t max_pops) noexcept nogil:
    """The state of a walk from a segment: it records into *pops (emptied here) the nodes where paths pop
    out, and aborts past max_pops of them (or CONTINUATION_NODES_PER_NODE times as many nodes below).
    pops NULL: a walk that records nothing (a mask walk, a continuation walked from the real stack)."""
    cdef walk_state walk
    if pops != NULL:
        pops.clear()
    walk.collect_pops = pops != NULL
    walk.aborted = False
    walk.max_pops = max_pops
    walk.pop_nodes = 0
    walk.pops = pops
    return walk


cdef inline walk_state plain_walk() noexcept nogil:
    return segment_walk(NULL, POPS_UNBOUNDED)


cdef inline bint is_bottom(node_t stack) noexcept nogil:
    """The empty stack or the segment base: no element on top, matches no code point."""
    return stack <= SEGMENT_BASE


cdef inline void add_unique(vector[node_t]& stacks, node_t stack) noexcept nogil:
    if find(stacks.begin(), stacks.end(), stack) == stacks.end():
        stacks.push_back(stack)


include "_stacks.pxi"
include "_stacksets.pxi"
include "_walk.pxi"
include "_segments.pxi"


cdef class MatchContext(SegmentCache):
    """What the matchers of one (Rules, Vocab) pair share: the stack-node pool, the stack sets,
    their transitions and loop classes, and the mask cache.

    Node and set ids mean the same to every matcher of the context, so a state one
    matcher worked out (a transition, a whole mask) serves all of them and every
    clone. Matchers take the context's lock around everything that may add to it.
    """



    def __cinit__(self):
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
        cdef int steps = 0
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
            with nogil:
                PyThread_acquire_lock(self.lock, 1)
                self.reserve_headroom()
                PyThread_release_lock(self.lock)
        return self.segment_entries_built - before

    def start_precompute(self, double seconds):
        """Build the segment cache ahead of use in a background thread, for at most `seconds` of that
        thread's time (precompute), and return at once: the caller's first masks do not wait for it
        (they build what they need on first use, and the thread then skips it). The thread takes the
        context's lock entry by entry with the GIL released, as every matcher does."""
        if self.trie is None or seconds <= 0 or self.precompute_thread is not None:
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
            result = self.transparent(pos)
            PyThread_release_lock(self.lock)
        return result

    def _build_heap(self, list heap, counter, double deadline, list returns, list rule_of, dict offset):
        cdef int32_t entry_id
        cdef trie_view trie = self.trie.view()
        def depth_into_repetitions(frames):
            return max(offset.get(rule_of[f], 0) for f in frames)
        while heap:
            if time.thread_time() > deadline:
                return
            _, d, _, frames = heapq.heappop(heap)
            last = frames[len(frames) - 1]   # (no negative indices: wraparound is off)
            below = returns[rule_of[last]]
            if len(frames) > 1 and self.transparent_locked(last) and len(frames) < MAX_SEGMENT_LENGTH \
                    and -1 not in below:
                extended = [frames + [f] for f in below]   # never end a segment on a transparent frame
            else:
                entry_id = self.build_frames(frames, below == [-1], &trie)
                if entry_id == -2:
                    return   # the segment cache is full
                if entry_id != -1 or len(frames) >= MAX_SEGMENT_LENGTH:
                    continue
                extended = [frames + [f] for f in below if f >= 0]
            for longer in extended:
                heapq.heappush(heap, (depth_into_repetitions(longer), d, counter, longer))
                counter += 1

    cdef void clear_masks(self) noexcept nogil:
        """Forget every cached mask (its chunks go back to the process-wide pool)."""
        release_chunks(self.mask_chunks)
        self.mask_slot.clear()
        self.partial_mask_slot.clear()
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

    cdef int32_t build_frames(self, list frames, bint whole, const trie_view* trie) except -3:
        """Build the entry of a segment given as element positions, top first (whole: nothing lies
        under it), or find it built: its id, -1 when it pops out too often, -2 when the cache is full."""
        cdef node_t node = SEGMENT_BASE
        cdef int32_t entry_id, length = len(frames)
        cdef position_t top = self.canonical[<position_t>frames[0]]
        cdef Py_ssize_t i
        with nogil:
            PyThread_acquire_lock(self.lock, 1)
        try:
            if self.segment_cache_full():
                return -2
            self.ensure_position_bits()
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
        cdef const grammar_element* elements = self.rules.elements.data()
        cdef const grammar_element* top
        cdef const trie_view* trie = &self.trie_arrays
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
            set_id = self.intern_set(current)
            it = self.mask_slot.find(set_id)
            if it != self.mask_slot.end():
                slot = deref(it).second
                return (self.mask_chunks[slot // MASKS_PER_CHUNK][(slot % MASKS_PER_CHUNK) * width + (token >> 5)]
                        >> (token & 31)) & 1
            if self.fast_failed.count(set_id):
                return 2
            if self.eog_tokens.size() and find(self.eog_tokens.begin(), self.eog_tokens.end(), token) \
                    != self.eog_tokens.end():
                for k in range(self.set_start[set_id], self.set_start[set_id + 1]):
                    if self.set_nodes[k] == EMPTY_STACK:
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
        cdef const grammar_element* elements = self.rules.elements.data()
        cdef const grammar_element* top
        cdef node_t stack
        cdef int64_t k
        while True:
            if cp[0] != 0:
                # a token terminal on a stack takes the token by id, whatever text remains
                for k in range(self.set_start[set_id], self.set_start[set_id + 1]):
                    stack = self.set_nodes[k]
                    if is_bottom(stack):
                        continue
                    top = &elements[self.nodes[stack].element]
                    if (top.type == LLAMA_GRETYPE_TOKEN and top.value == <uint32_t>token) or \
                            (top.type == LLAMA_GRETYPE_TOKEN_NOT and top.value != <uint32_t>token):
                        return 1
            if cp[0] == 0:
                break
            set_id = self.transition(set_id, cp[0])
            if set_id < 0:
                return 0
            cp += 1
        if end.n_remain == 0:
            return 1
        return 1 if self.set_accepts_partial(set_id, end) else 0

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
        cdef int64_t width = (self.trie_arrays.n_vocab + 31) >> 5, i
        cdef size_t k
        cdef token_t token
        cdef uint64_t key
        cdef int64_t slot
        PyThread_acquire_lock(self.lock, 1)
        try:
            current = stacks
            set_id = self.intern_set(current)
            # the mask depends on the set and the open character alone (value < 2^21, n_remain 1-3)
            key = (<uint64_t><uint32_t>set_id << 32) | (<uint64_t>state.value << 2) | <uint32_t>state.n_remain
            it = self.partial_mask_slot.find(key)
            if it != self.partial_mask_slot.end():
                slot = deref(it).second
                memcpy(out, self.mask_chunks[slot // MASKS_PER_CHUNK].data() + (slot % MASKS_PER_CHUNK) * width,
                       width * sizeof(uint32_t))
                self.cached_masks += 1
                return 0
            self.partial_masks += 1
            self.reference_work = 0
            self.work = 0
            self.collect_rejects(stacks, state, vocab, candidates, n, rejects, scratch)
            memset(out, 0, width * sizeof(uint32_t))
            for i in range(n):
                token = candidates[i]
                set_token_bit(out, token)
            for k in range(rejects.size()):
                token = candidates[rejects[k].index]
                clear_token_bit(out, token)
            self.partial_mask_slot[key] = self.store_mask(out, width)
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
                    element = self.rules.elements[self.nodes[node].element]
                    current.append((<int>element.type, <int>element.value))
                    node = self.nodes[node].parent
                current.reverse()
                out.append(current)
        finally:
            PyThread_release_lock(self.lock)
        return out

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
        PyThread_acquire_lock(self.lock, 1)
        try:
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
                    # match_partial_char's range of the code points this sequence can complete to
                    if n_remain == 1 and partial.value < 2:
                        return 0
                    low = partial.value << (n_remain * 6)
                    high = low | ((1 << (n_remain * 6)) - 1)
                    if low == 0:
                        if n_remain == 2:
                            low = 1 << 11
                        elif n_remain == 3:
                            low = 1 << 16
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
        finally:
            PyThread_release_lock(self.lock)
        return 0

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
        self.mask_slot[set_id] = self.store_mask(out, width)
        return 0

    cdef int64_t store_mask(self, const uint32_t* out, int64_t width) noexcept nogil:
        """Copy a mask into the mask cache; its slot (the cache may have been emptied to make room)."""
        cdef int64_t slot
        # Masks live in fixed-size chunks, so storing one never moves the others.
        if (<size_t>(self.n_cached_masks + 1) * width * sizeof(uint32_t)) > MAX_MASK_CACHE_BYTES:
            self.clear_masks()
        slot = self.n_cached_masks
        if slot // MASKS_PER_CHUNK >= <int64_t>self.mask_chunks.size():
            self.mask_chunks.push_back(vector[uint32_t]())
            take_chunk(self.mask_chunks.back(), MASKS_PER_CHUNK * width)
        self.mask_chunks.back().insert(self.mask_chunks.back().end(), out, out + width)
        self.n_cached_masks += 1
        return slot


cdef vector[uint8_t] _nullable_rules(Rules rules):
    """Per rule id, whether the rule can match the empty string (the least fixpoint of _rules)."""
    return rules_nullable(rules, rules_may_be_empty(rules))


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
    R_1 .. R_(n-m-1) of every such chain (R_0, with nothing after x, is left out).

    Read off the flat elements (a Python list per rule only for the rules of that shape: two
    alternatives, the second empty), so it costs next to nothing on a grammar of thousands of rules."""
    cdef const grammar_element* elements = rules.elements.data()
    cdef vector[uint8_t] nullable = _nullable_rules(rules)
    cdef Py_ssize_t rule_id, n_rules = rules.rule_start.size()
    cdef position_t pos, first
    bases = {}   # rule -> x, for R ::= x |
    steps = {}   # rule -> (x, next rule), for R ::= x next |
    for rule_id in range(n_rules):
        first = rules.rule_start[rule_id]
        pos = first
        while elements[pos].type != LLAMA_GRETYPE_ALT and elements[pos].type != LLAMA_GRETYPE_END:
            pos += 1
        # two alternatives, the first not empty and the second empty
        if pos == first or elements[pos].type != LLAMA_GRETYPE_ALT or elements[pos + 1].type != LLAMA_GRETYPE_END:
            continue
        body = tuple((<int>elements[q].type, <int>elements[q].value) for q in range(first, pos))
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
    A new context builds its segment cache ahead of use for up to `precompute` seconds, in a
    background thread (MatchContext.start_precompute)."""
    key = (id(vocab), max_stacks)
    cdef MatchContext ctx = rules.contexts.get(key)
    if ctx is None or ctx.vocab is not vocab or ctx.nodes.size() > CONTEXT_NODE_BUDGET:
        ctx = MatchContext(rules, vocab, max_stacks)
        ctx.start_precompute(precompute)
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


def _count(value, what):
    """A non-negative int (or numpy integer) count; anything else is refused, not coerced."""
    if isinstance(value, (bool, np.bool_)) or not hasattr(type(value), "__index__"):
        raise TypeError(f"{what} must be an int, got {type(value).__name__} {value!r}")
    value = operator.index(value)
    if value < 0:
        raise ValueError(f"{what} must be >= 0, got {value}")
    return value


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
        self.eog_accepted = False
        self.max_rollback = max_rollback
        self.history_head = 0
        self.history_count = 0
        self.history_stacks.resize(max_rollback)
        self.history_partial.resize(max_rollback)
        self.history_flags.resize(max_rollback)
        self.history_trigger = [None] * max_rollback if self.lazy else None
        self.in_transaction = False
        self.saved_trigger = []
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

    cdef bint partial_into(self, object candidates, uint32_t* out) except -1:
        """The mask of a state inside a character into out from the candidates' paths (the caller holds the
        matcher's lock); False when it is answered on the reference path instead."""
        cdef MatchContext ctx = self.ctx
        cdef const token_t[::1] ids = candidates
        cdef vocab_view vocab = self.decoded.view()
        cdef int status = 2
        if ids.shape[0] == 0:
            return False
        try:
            with nogil:
                status = ctx.partial_mask_into(self.active_stacks, self.partial, &vocab, &ids[0], ids.shape[0], out)
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
            # end-of-generation token is decided by the stacks: check just those (kept per set and open
            # character in the mask cache).
            candidates = self.decoded.continuation_candidates()
            if self.partial_into(candidates, &view[0]):
                return words
            # (past a bound of the fast path: one by one, as llama.cpp does)
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
        """Fill an int32 bitmask (bit set = allowed) of shape ((n_vocab + 31) // 32,) or (batch, that) at
        row index, in place: a numpy array or a CPU torch tensor (its memory, viewed without a copy)."""
        cdef uint32_t[::1] row_view
        cdef trie_view trie
        cdef MatchContext ctx = self.ctx
        self._require_vocab()
        n_vocab = self.decoded.n_vocab
        width = (n_vocab + 31) // 32
        array = _bitmask_array(bitmask)
        if not isinstance(array, np.ndarray) or array.dtype != np.int32 or array.ndim not in (1, 2) \
                or array.shape[array.ndim - 1] != width or not array.flags.writeable \
                or not (array[0] if array.ndim == 2 and array.shape[0] else array).flags.c_contiguous:
            raise ValueError(
                f"Invalid bitmask: expected a writable int32 numpy array or CPU torch tensor of shape ({width},) "
                f"or (batch, {width}) with contiguous rows, got {getattr(bitmask, 'dtype', type(bitmask).__name__)} "
                f"of shape {tuple(getattr(bitmask, 'shape', ())) or None}")
        index = _token_id(index, "index")
        batch = 1 if array.ndim == 1 else array.shape[0]
        if not 0 <= index < batch:
            raise ValueError(f"Invalid index: {index} is outside [0, {batch}) for a bitmask of shape {array.shape}")
        row = array if array.ndim == 1 else array[index]
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
            self._check_ids(np.array([value], dtype=np.int64), "token id")   # (raises the ValueError)
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
            return self._rejected_indices(np.array([token], dtype=np.int32)).shape[0] == 0
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
            self.push_history(before, partial_before, flags, trigger)
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
            self.push_history(current, partial_before, flags, trigger)
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
        if self.max_rollback:
            before = self.active_stacks
            if self.lazy:
                trigger = (bytes(self.trigger_bytes), tuple(self.trigger_buffer_positions))
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
        self.push_history(before, partial_before, flags, trigger)
        return 0

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

    # -- the engines' matcher API: rollback, accept_tokens, validate_tokens, jump-forward -----------
    def _state_extras(self):
        """(HISTORY_* flags, lazy trigger state or None) of the current state, as a rollback entry keeps them."""
        flags = (HISTORY_AWAITING if self.awaiting_trigger else 0) | (HISTORY_EOG if self.eog_accepted else 0)
        if not self.lazy:
            return flags, None
        return flags, (bytes(self.trigger_bytes), tuple(self.trigger_buffer_positions))

    cdef int push_history(self, vector[node_t]& stacks, partial_utf8 partial, uint8_t flags, object trigger) \
            except -1:
        """Make (stacks, partial, flags, trigger) the newest rollback entry (stacks is swapped in, left empty).
        In a transaction, an entry this overwrites (the ring is full) is kept aside for undo."""
        cdef int slot = self.history_head
        if self.max_rollback == 0:
            return 0
        if self.in_transaction and self.history_count == self.max_rollback:
            self.saved_slots.push_back(slot)
            self.saved_stacks.push_back(vector[node_t]())
            self.saved_stacks.back().swap(self.history_stacks[slot])
            self.saved_partial.push_back(self.history_partial[slot])
            self.saved_flags.push_back(self.history_flags[slot])
            if self.lazy:
                self.saved_trigger.append(self.history_trigger[slot])
        self.history_stacks[slot].swap(stacks)
        self.history_partial[slot] = partial
        self.history_flags[slot] = flags
        if self.lazy:
            self.history_trigger[slot] = trigger
        self.history_head = (slot + 1) % self.max_rollback
        if self.history_count < self.max_rollback:
            self.history_count += 1
        return 0

    cdef int restore_slot(self, int slot) except -1:
        """Make the rollback entry at slot the current state (the entry is consumed)."""
        self.active_stacks.swap(self.history_stacks[slot])
        self.history_stacks[slot].clear()
        self.partial = self.history_partial[slot]
        self.awaiting_trigger = (self.history_flags[slot] & HISTORY_AWAITING) != 0
        self.eog_accepted = (self.history_flags[slot] & HISTORY_EOG) != 0
        if self.lazy:
            trigger_bytes, positions = self.history_trigger[slot]
            self.trigger_bytes = bytearray(trigger_bytes)
            self.trigger_buffer_positions = list(positions)
            self.history_trigger[slot] = None
        return 0

    def rollback(self, n=1):
        """Undo the last n accepted steps (tokens through accept/accept_token/accept_tokens, or one
        accept_bytes call each): the state, partial character, trigger state and termination are the
        ones before them. At most the last max_rollback steps are kept (fewer since reset() or a fresh
        matcher); asking for more raises ValueError and changes nothing."""
        n = _count(n, "rollback: n")
        self.enter()
        try:
            if n > self.history_count:
                raise ValueError(
                    f"cannot roll back {n} steps: this matcher keeps the last {self.history_count} "
                    f"(max_rollback={self.max_rollback}; steps before a reset() or past max_rollback are gone)")
            if n == 0:
                return
            slot = (self.history_head - n) % self.max_rollback
            self.restore_slot(slot)
            # the n - 1 newer entries are dropped with it
            for k in range(1, n):
                self.history_stacks[(slot + k) % self.max_rollback].clear()
                if self.lazy:
                    self.history_trigger[(slot + k) % self.max_rollback] = None
            self.history_head = slot
            self.history_count -= n
        finally:
            self.leave()

    @property
    def rollback_depth(self):
        """How many steps rollback() can undo now."""
        return self.history_count

    def _checked_tokens(self, ids):
        """A list of int token ids in [0, n_vocab), or TypeError/ValueError naming what is wrong."""
        if self.vocab is None:
            raise ValueError("this Grammar has no vocabulary; use accept_token(token_id, piece)")
        if isinstance(ids, (str, bytes, bytearray)) or not hasattr(ids, "__iter__"):
            raise TypeError(f"ids must be a sequence of token ids, got {type(ids).__name__}")
        if isinstance(ids, np.ndarray):
            if ids.ndim != 1 or ids.dtype.kind not in "iu":
                raise ValueError(f"Invalid ids: expected a 1-D integer array, got {ids.dtype} of shape {ids.shape}")
            ids = ids.tolist()
        tokens = [t if type(t) is int else _token_id(t) for t in ids]
        cdef int64_t n_vocab = self.decoded.n_vocab
        for t in tokens:
            if not 0 <= t < n_vocab:
                raise ValueError(f"Invalid token id: {t} is outside [0, {n_vocab})")
        return tokens

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
        cdef int start_head = self.history_head, start_count = self.history_count
        cdef int k, slot
        start_trigger = (bytearray(self.trigger_bytes), list(self.trigger_buffer_positions)) if self.lazy else None
        accepted = 0
        finished = False
        self.in_transaction = True
        try:
            for token in tokens:
                if not self.try_accept(token):
                    break
                accepted += 1
            finished = True
        finally:
            self.in_transaction = False
            if not (finished and keep and accepted == len(tokens)):
                # put back what the pushes overwrote, newest first, so a slot overwritten twice ends
                # with its original entry
                for k in range(<int>self.saved_slots.size() - 1, -1, -1):
                    slot = self.saved_slots[k]
                    self.history_stacks[slot].swap(self.saved_stacks[k])
                    self.history_partial[slot] = self.saved_partial[k]
                    self.history_flags[slot] = self.saved_flags[k]
                    if self.lazy:
                        self.history_trigger[slot] = self.saved_trigger[k]
                self.history_head = start_head
                self.history_count = start_count
                self.active_stacks.swap(start_stacks)
                self.partial = start_partial
                self.awaiting_trigger = start_awaiting
                self.eog_accepted = start_eog
                if self.lazy:
                    self.trigger_bytes, self.trigger_buffer_positions = start_trigger
            self.saved_slots.clear()
            self.saved_stacks.clear()
            self.saved_partial.clear()
            self.saved_flags.clear()
            self.saved_trigger = []
        return accepted

    def accept_tokens(self, ids):
        """Accept all of ids (each as accept() does, one rollback step each) or none: True when every
        token was accepted; False, with the state and the rollback history unchanged, when the grammar
        refuses one or an end-of-generation token came before it. Ids that are not ints in
        [0, n_vocab) raise TypeError/ValueError before anything is accepted."""
        tokens = self._checked_tokens(ids)
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
        tokens = self._checked_tokens(ids)
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
        by_piece, ordered, longest = _ordinary_pieces(self.vocab, self.decoded)
        tokens = []
        offset = 0
        last_piece = b""
        while offset < len(forced):
            for length in range(min(longest, len(forced) - offset), 0, -1):
                token = by_piece.get(forced[offset:offset + length])
                if token is not None:
                    break
            else:
                break
            tokens.append(token)
            last_piece = forced[offset:offset + length]
            offset += length
        if tokens:
            after = bisect.bisect_right(ordered, last_piece)
            if after < len(ordered) and ordered[after].startswith(last_piece):
                tokens.pop()
        return tokens

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
        other.eog_accepted = self.eog_accepted
        other.max_rollback = self.max_rollback
        other.history_head = self.history_head
        other.history_count = self.history_count
        other.history_stacks = self.history_stacks
        other.history_partial = self.history_partial
        other.history_flags = self.history_flags
        other.history_trigger = None if self.history_trigger is None else list(self.history_trigger)
        other.in_transaction = False
        other.saved_trigger = []

    def reset(self):
        """Back to the state of a fresh matcher (llama_sampler_reset on the grammar sampler); the
        rollback history is emptied."""
        self.enter()
        try:
            self.partial.value = 0
            self.partial.n_remain = 0
            self.awaiting_trigger = self.lazy
            self.trigger_bytes = bytearray()
            self.trigger_buffer_positions = []
            self.eog_accepted = False
            for k in range(self.max_rollback):
                self.history_stacks[k].clear()
            if self.lazy:
                self.history_trigger = [None] * self.max_rollback
            self.history_head = 0
            self.history_count = 0
            self._init_stacks()
        finally:
            self.leave()

    def __repr__(self):
        return (f"<Grammar: {self.active_stacks.size()} stacks, complete={self.complete}, "
                f"awaiting_trigger={self.awaiting_trigger}>")


_ORDINARY_PIECES = {}


def _ordinary_pieces(vocab, DecodedVocab decoded):
    """Per vocabulary, once: {piece: lowest id} of the ordinary tokens (not end-of-generation, not
    control, not empty), those pieces sorted (to find a longer piece that starts with one), and the
    longest piece's length. Kept while the Vocab lives."""
    cached = _ORDINARY_PIECES.get(id(vocab))
    if cached is not None and cached[0] is vocab:
        return cached[1]
    attrs = vocab.token_attrs
    by_piece = {}
    for token, piece in enumerate(vocab.pieces):
        if not piece or decoded.is_eog[token] or (attrs is not None and attrs[token] & 8):
            continue
        by_piece.setdefault(piece, token)
    ordered = sorted(by_piece)
    table = (by_piece, ordered, max((len(p) for p in ordered), default=0))
    _ORDINARY_PIECES[id(vocab)] = (vocab, table)
    if len(_ORDINARY_PIECES) > 16:
        _ORDINARY_PIECES.pop(next(iter(_ORDINARY_PIECES)))
    return table


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


def _bitmask_array(bitmask):
    """A numpy view of a bitmask's memory (no copy): numpy arrays as they are, CPU torch tensors
    through Tensor.numpy(); anything else is returned unchanged for the caller's error."""
    if isinstance(bitmask, np.ndarray):
        return bitmask
    if type(bitmask).__module__.partition(".")[0] == "torch" and hasattr(bitmask, "numpy"):
        if bitmask.device.type != "cpu":
            raise ValueError(f"Invalid bitmask: expected a CPU tensor, got one on {bitmask.device}; fill a CPU "
                             "bitmask and move it")
        if bitmask.requires_grad:
            raise ValueError("Invalid bitmask: the tensor requires grad")
        return bitmask.numpy()
    return bitmask


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
    array = _bitmask_array(bitmask)
    if not isinstance(array, np.ndarray) or array.ndim != 2 or array.shape[0] < len(grammars):
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
