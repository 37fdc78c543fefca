# Declarations of the GBNF engine (_grammar.pyx). Names follow llama.cpp's
# src/llama-grammar.cpp where the semantics are the same. The grammar IR (element types, Rules) is
# _rules.pxd's; character classes are _charclass.pxd's, bit sets _bits.pxd's.
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libcpp.map cimport map as cpp_map
from bankml.engine._batchpool cimport batch_pool, batch_task
from bankml.engine._flatmap cimport flat_map
from bankml.engine._zeroarray cimport zero_array
from libcpp.unordered_set cimport unordered_set
from libcpp.utility cimport pair
from libcpp.vector cimport vector
from cpython.pythread cimport PyThread_type_lock
from cpython.ref cimport PyObject
cimport numpy as cnp
cimport cython

from bankml.engine._typedefs cimport element_value_t, node_t, offset_t, position_t, token_t
from bankml.engine._utf8 cimport partial_utf8
from bankml.engine._trie cimport DecodedVocab, VocabTrie, trie_view, vocab_view
from bankml.engine._elements cimport (LLAMA_GRETYPE_ALT, LLAMA_GRETYPE_CHAR, LLAMA_GRETYPE_CHAR_ANY,
                                      LLAMA_GRETYPE_CHAR_NOT, LLAMA_GRETYPE_END, LLAMA_GRETYPE_RULE_REF,
                                      LLAMA_GRETYPE_TOKEN, LLAMA_GRETYPE_TOKEN_NOT, grammar_element)
from bankml.engine._rules cimport Rules


# One node of a matcher's persistent stack tree: a stack is the path from a node
# to the root. Nodes are hash-consed, so two equal stacks are one node id and
# comparing stacks is comparing integers.
cdef struct stack_node:
    position_t element   # top of this stack: an index into Rules.elements
    node_t parent        # the stack below it; EMPTY_STACK at the bottom


# One entry of the segment cache: the mask of a stack's top segment (its top frames, the
# rest of the stack replaced by SEGMENT_BASE), split into the tokens accepted whatever lies
# below the segment and the trie nodes at which a path pops out of it (continuations).
cdef struct segment_entry:
    int64_t tokens_start        # offset into entry_tokens (n_tokens >= 0) or entry_words (dense)
    int32_t n_tokens            # accepted token ids stored one by one, or -1 when stored as dense words
    int32_t n_continuations
    int64_t continuations_start # offset into entry_continuations
    int32_t length              # frames in the segment


# What the fast path knows about a stack set, filled as it is needed (flags say what is known).
cdef struct set_summary:
    uint64_t class_ascii[2]     # the ASCII code points that lead to the successor (its class)
    int64_t viable_start        # offset of the set's intervals in viable_bounds, VIABLE_UNKNOWN before computed
    int32_t viable_count        # (first, last) code point pairs there
    int32_t successor           # the set most code points lead to (itself in a loop), or NO_SET
    int32_t run_length          # sets in a row along the successors with this set's class, RUN_UNKNOWN before
    int32_t run_end             # the set after that run, or NO_SET
    uint8_t flags               # SET_* bits
    uint8_t partial_mode        # PARTIAL_* for set_accepts_partial


cdef enum:
    SET_CLASS_KNOWN = 1         # successor and class are computed (compute_loop)
    SET_CLASS_NON_ASCII = 2     # every code point >= 0x80 leads to the successor
    SET_ALL_PARTIALS = 4        # the set takes every partial character that can still complete
    SET_HAS_BASE = 8            # the set holds SEGMENT_BASE: some path popped out of the segment
    SET_RUN_IMPURE = 16         # (with run_length) a set of its run holds SEGMENT_BASE or a token terminal on top
    SET_ABOVE_KNOWN = 32        # SET_ABOVE_CONSTANT is computed (summarize_tops)
    SET_ABOVE_CONSTANT = 64     # every class on top takes all code points >= 0x80 alike (each all or none)

# set_summary.partial_mode: whether a set takes characters left unfinished by a token
cdef enum:
    PARTIAL_UNKNOWN = 0
    PARTIAL_ALL = 1             # every one that can still complete (overlong leads never)
    PARTIAL_NONE = 2            # none
    PARTIAL_MIXED = 3           # ask each stack


# What one trie walk carries (passed to trie_visit explicitly, never kept on the context): whether it
# records where paths pop out of a segment, and the bound past which it gives up.
cdef struct walk_state:
    bint collect_pops           # the walk runs from a segment: record the nodes where paths pop out of it
    bint aborted                # it popped out too often and stopped (the segment is too short)
    size_t max_pops             # the bound on those nodes (POPS_UNBOUNDED: none)
    int64_t pop_nodes           # trie nodes below them, in all
    vector[int32_t]* pops       # where they are recorded (NULL when not collecting)


# An exception of take_run: a node whose code point leaves the run's class, topmost on its path, with what
# the run reads of it (copied from the trie's arrays, so a kept list is read in order).
cdef struct run_exception:
    int64_t token_lo            # its subtree's token positions [token_lo, token_hi)
    int64_t token_hi
    int32_t node
    int32_t node_end            # its subtree's nodes [node, node_end)
    int32_t depth               # code points from the root
    uint32_t cp                 # its code point


cdef struct run_exception_list:
    uint64_t outside_lo         # the code points outside the run's class (bits 0-63, 64-127)
    uint64_t outside_hi
    int32_t child               # the subtree's node
    int32_t depth               # scanned this many code points below it
    int64_t start               # its exceptions: run_lists_items[start:start + count], shallower first
    int64_t count


# A token being checked against the stacks: the code points still to match
# (0-terminated) and the partial UTF-8 state its piece ends in.
cdef struct grammar_candidate:
    int64_t index
    const uint32_t* code_points
    partial_utf8 partial
    token_t id


# The engine's parts. Each owns one kind of id and holds the parts it uses (composition, no subclass
# chain); all are final and live in this one extension, so their calls to one another are direct C calls.
@cython.final
cdef class StackPool:
    # node ids: the hash-consed stack nodes, llama.cpp's reference path over them, and the work budgets
    cdef readonly Rules rules
    cdef vector[stack_node] nodes
    cdef flat_map[uint64_t, node_t] node_ids
    cdef size_t max_stacks
    cdef vector[node_t] advance_todo, advance_seen   # scratch of advance_stack, no allocation per call
    cdef unordered_set[node_t] advance_seen_set    # advance_stack's seen once it outgrows a linear search
    # work budgets: what the current fast mask (work) or reference mask (reference_work) has done, and the
    # fast path's limit (past it the mask goes to the reference path); INT64_MAX outside a fast mask
    cdef int64_t work, work_limit, reference_work
    cdef int64_t fast_work_budget                  # FAST_WORK_BUDGET unless a test changed it
    cdef readonly int64_t max_fast_work            # the most work a completed fast mask took (for the figures)
    cdef readonly int64_t last_reference_work      # the work of the last completed reference mask

    cdef int accept_token_stacks(self, const vector[node_t]& stacks, token_t token, const uint32_t* code_points,
                                 size_t n_code_points, vector[node_t]& stacks_new) except -1 nogil
    cdef int collect_rejects(self, const vector[node_t]& stacks, partial_utf8 state, const vocab_view* vocab,
                             const token_t* ids, int64_t n, vector[grammar_candidate]& rejects,
                             vector[uint32_t]& scratch) except -1 nogil
    cdef node_t push(self, node_t parent, position_t element) except -1 nogil
    cdef int charge(self, int64_t steps) except -1 nogil
    cdef void reserve_headroom(self) noexcept nogil
    cdef int advance_stack(self, node_t stack, vector[node_t]& new_stacks) except -1 nogil
    cdef int accept_chr(self, node_t stack, uint32_t chr, vector[node_t]& new_stacks) except -1 nogil
    cdef int reject_candidates(self, const vector[node_t]& stacks, const vector[grammar_candidate]& candidates,
                               vector[grammar_candidate]& rejects) except -1 nogil
    cdef int reject_candidates_for_stack(self, node_t stack, const vector[grammar_candidate]& candidates,
                                         vector[grammar_candidate]& rejects) except -1 nogil
    cdef int forced_bytes(self, const vector[node_t]& start, partial_utf8 partial, size_t max_bytes,
                          vector[uint8_t]& out) except -1 nogil


@cython.final
cdef class StackSets:
    # set ids: interned stack sets, their transitions and summaries
    cdef StackPool pool
    cdef vector[node_t] step_stacks                # scratch of step_set
    cdef vector[node_t] set_nodes                  # set i is set_nodes[set_start[i]:set_start[i + 1]]
    cdef vector[int64_t] set_start
    cdef flat_map[uint64_t, int32_t] set_by_hash   # hash of a set's nodes -> the last set with that hash
    cdef vector[int32_t] set_hash_next             # the previous set with the same hash, or -1
    cdef flat_map[uint64_t, int32_t] transitions   # (set << 32 | code point) -> set, or -1 (no stack survives)
    cdef flat_map[uint64_t, pair[uint64_t, int32_t]] pattern_transitions  # hash(set, matching stacks) -> (matching stacks, set)
    cdef vector[set_summary] summaries             # per set id
    cdef vector[int32_t] run_chain                 # scratch of compute_run
    cdef int32_t max_token_depth                   # the most code points any token takes
    cdef zero_array[uint64_t] element_ascii        # 2 words per element position: the ASCII members of its class
    cdef zero_array[uint8_t] element_flags         # per element position: ELEMENT_* bits, filled on first use
    cdef vector[uint32_t] viable_bounds            # (first, last) code point pairs
    cdef zero_array[int64_t] element_long          # per element position: 0 unknown, -1 a short class (match_char),
                                                   # else 1 + where its intervals start in class_bounds
    cdef vector[uint32_t] class_bounds             # per long class: count, its end's position, (first, last) pairs

    cdef int32_t intern_set(self, vector[node_t]& nodes) except -2 nogil
    cdef int32_t step_set(self, int32_t set_id, uint32_t cp) except -2 nogil
    cdef int32_t transition(self, int32_t set_id, uint32_t cp) except -2 nogil
    cdef int element_info(self, position_t pos) except -1 nogil
    cdef int index_class(self, position_t pos) except -1 nogil
    cdef int class_takes(self, position_t pos, uint32_t cp, const grammar_element** after) except -1 nogil
    cdef int compute_loop(self, int32_t set_id) except -1 nogil
    cdef int summarize_tops(self, int32_t set_id) except -1 nogil
    cdef uint8_t partial_mode_of(self, int32_t set_id) except 0 nogil
    cdef bint set_accepts_partial(self, int32_t set_id, partial_utf8 partial) except -1 nogil
    cdef bint constant_above(self, int32_t set_id) except -1 nogil
    cdef bint chain_accepts(self, int32_t set_id, uint64_t ascii_lo, uint64_t ascii_hi, uint8_t flags,
                            int32_t depth) except -1 nogil
    cdef bint same_class(self, int32_t a, int32_t b) noexcept nogil
    cdef int compute_run(self, int32_t set_id) except -1 nogil
    cdef int compute_viable(self, int32_t set_id) except -1 nogil
    cdef void reserve_headroom(self) noexcept nogil


@cython.final
cdef class TrieWalk:
    # trie positions: the vocabulary trie walked with a stack set, marking accepted positions
    cdef StackPool pool
    cdef StackSets sets
    cdef VocabTrie trie
    cdef vector[uint32_t] trie_token_words         # the bits of every token in the trie
    cdef vector[uint64_t] position_bits            # scratch: one bit per trie position, all zero between walks
    cdef int64_t n_marked                          # positions marked by the current walk (an upper bound)
    cdef trie_view trie_arrays                     # trie.view(), taken once (the trie never changes)
    cdef readonly int64_t visited_nodes
    cdef readonly int64_t run_takes                # subtrees take_run took along a bounded run
    cdef vector[int32_t] run_sets                  # scratch stack of take_run (each call pops what it pushed)
    cdef vector[run_exception] run_items           # ... and of its exceptions scanned (scan_run_exceptions)
    cdef vector[run_exception_list] run_lists      # exceptions kept per (big subtree, outside code points)
    cdef vector[run_exception] run_lists_items     # ... their items
    cdef vector[uint64_t] run_cover                # scratch of take_run, a bit per trie node: below an exception
                                                   # (all 0 between calls; bits, not bytes: it stays in cache)

    cdef void ensure_position_bits(self) noexcept nogil
    cdef void clear_marks(self) noexcept nogil
    cdef void drain_subtree(self, const trie_view* trie, int32_t node, vector[token_t]* tokens,
                            uint32_t* out) noexcept nogil
    cdef int visit_child(self, const trie_view* trie, int32_t child, int32_t set_id, walk_state* walk) except -1 nogil
    cdef bint take_run(self, const trie_view* trie, int32_t child, int32_t set_id, walk_state* walk) except -1 nogil
    cdef int scan_run_exceptions(self, const trie_view* trie, int32_t child, const uint64_t* outside,
                                 int32_t top_depth) except -1 nogil
    cdef int32_t run_exception_list(self, const trie_view* trie, int32_t child, const uint64_t* outside,
                                    int32_t top_depth) except -2 nogil
    cdef bint words_at_run_end(self, int32_t set_id) except -1 nogil
    cdef bint set_may_take(self, int32_t set_id, uint32_t cp) except -1 nogil
    cdef int run_end_nodes(self, const trie_view* trie, int32_t child, int32_t after, int32_t depth,
                           walk_state* walk) except -1 nogil
    cdef int trie_visit(self, const trie_view* trie, int32_t node, int32_t set_id, walk_state* walk) except -1 nogil
    cdef int walk_mask(self, int32_t set_id, const trie_view* trie, uint32_t* out) except -1 nogil
    cdef int positions_to_tokens(self, const trie_view* trie, uint32_t* out) except -1 nogil


# Scratch of the segment cache (vectors reused from call to call, so a mask allocates nothing).
@cython.final
cdef class SegmentScratch:
    cdef vector[position_t] frames                 # segment_of's frames
    cdef vector[token_t] collected                 # the tokens of one entry's continuations
    cdef vector[int32_t] pops                      # the nodes where the current segment walk popped
    cdef vector[int32_t] resolved                  # entry per stack of the set being masked
    cdef vector[node_t] resolved_below             # ... and the stack below each one's segment
    cdef vector[uint8_t] resolved_done             # ... whether its continuations are answered already (a union walk)
    cdef vector[node_t] union_stacks               # the stacks of a union walk


# What the segment cache did (for the figures and the tests).
cdef struct segment_counters:
    int64_t hits                # entries found built
    int64_t built               # entries built
    int64_t grown               # segment walks that popped out too often (the segment grew by a frame)
    int64_t continuation_walks  # continuations walked from the real stack below
    int64_t continuation_entries
    int64_t union_walks         # continuations of one entry under many stacks below, walked at once


@cython.final
cdef class SegmentCache:
    # segment entry ids: per top segment of a stack, its tokens and continuations
    cdef StackPool pool
    cdef StackSets sets
    cdef TrieWalk walk
    cdef SegmentScratch scratch
    cdef segment_counters counters
    cdef zero_array[int32_t] canonical_shift       # per element position: canonical_of(p) - p (_repetition_canonical)
    cdef vector[int32_t] chain_depth               # per rule: k of a repetition chain's R_k (0: none; _repetition_chains_into)
    cdef vector[int32_t] chain_next                # per rule: R_(k-1) of a chain rule (-1: none)
    # the segment cache: per top segment of a stack, the tokens accepted whatever lies below it and the
    # trie nodes where a path pops out of it (continuations), finished against the real stack at run time
    cdef bint use_segments
    cdef zero_array[uint32_t] segment_lengths      # per element position: bit L-1 set when entries of L frames exist
    cdef flat_map[uint64_t, pair[node_t, node_t]] segment_nodes  # (stack, L) -> (segment stack, stack below it)
    cdef flat_map[node_t, int32_t] entry_of   # segment stack -> entry
    cdef vector[segment_entry] entries
    cdef vector[uint32_t] entry_words              # dense entries, width words each
    cdef flat_map[uint64_t, int64_t] dense_offsets  # hash of a dense entry's words -> their offset (one copy each)
    cdef vector[token_t] entry_tokens              # sparse entries
    cdef vector[int32_t] entry_continuations
    cdef flat_map[node_t, int32_t] context_sets  # stack below a segment -> the set it advances to
    cdef flat_map[uint64_t, pair[int64_t, int32_t]] continuation_results  # (stack below, node) -> tokens
    cdef flat_map[uint64_t, int32_t] continuation_entry_of  # (frame re-pushed on SEGMENT_BASE, node) -> entry, -1 none
    cdef flat_map[uint64_t, pair[int64_t, int32_t]] entry_results  # (entry, stack below) -> its continuations' tokens
    cdef int64_t compose_cost                      # what the last segment_mask would cost to compose again
    cdef vector[token_t] continuation_tokens
    cdef size_t continuations_limit                # max_pops of segments that have a stack below them
    cdef vector[uint8_t] rule_nullable             # per rule id: it can match the empty string
    cdef zero_array[uint8_t] element_transparent   # per element position: 0 unknown, 1 no, 2 the rest of its alternative is nullable

    cdef int segment_of(self, node_t stack, int32_t length, node_t* segment, node_t* below) except -1 nogil
    cdef int32_t build_entry(self, node_t segment, int32_t length, const trie_view* trie, size_t max_pops) \
        except -2 nogil
    cdef position_t canonical_of(self, position_t pos) noexcept nogil
    cdef int32_t find_entry(self, node_t stack, const trie_view* trie, node_t* below) except -2 nogil
    cdef int32_t context_set(self, node_t below) except -2 nogil
    cdef bint transparent(self, position_t pos) noexcept nogil
    cdef int32_t skip_transparent(self, node_t stack, int32_t length) noexcept nogil
    cdef int segment_mask(self, int32_t set_id, const trie_view* trie, uint32_t* out) except -1 nogil
    cdef void clear_segments(self) noexcept nogil
    cdef bint segment_cache_full(self) noexcept nogil
    cdef size_t segment_cache_bytes(self) noexcept nogil
    cdef int32_t build_continuation_entry(self, node_t frame, int32_t node, const trie_view* trie) except -2 nogil
    cdef int continuation_into(self, const trie_view* trie, int32_t node, node_t below, uint32_t* out,
                               vector[token_t]* collect, int32_t depth) except -1 nogil
    cdef int32_t build_frames(self, list frames, bint whole, const trie_view* trie) except -3
    cdef bint union_continuations(self, int64_t k, const trie_view* trie, uint32_t* out) except -1 nogil
    cdef void reserve_headroom(self) noexcept nogil


# mask slots: cached whole-vocabulary masks, of a stack set or of a (set, open character) pair
@cython.final
cdef class MaskCache:
    cdef flat_map[int32_t, int64_t] set_slot  # set -> slot of its cached mask
    cdef flat_map[uint64_t, int64_t] partial_slot  # (set, open character) -> slot of its cached mask
    cdef vector[vector[uint32_t]] chunks           # slot s is chunks[s // MASKS_PER_CHUNK] at (s % MASKS_PER_CHUNK) * width
    cdef int64_t n_masks
    cdef int64_t width                             # words per mask

    cdef int64_t slot_of_set(self, int32_t set_id) noexcept nogil
    cdef int64_t slot_of_partial(self, uint64_t key) noexcept nogil
    cdef void copy_slot(self, int64_t slot, uint32_t* out) noexcept nogil
    cdef int slot_bit(self, int64_t slot, token_t token) noexcept nogil
    cdef int64_t store(self, const uint32_t* mask) noexcept nogil
    cdef void keep_set(self, int32_t set_id, const uint32_t* mask) noexcept nogil
    cdef void keep_partial(self, uint64_t key, const uint32_t* mask) noexcept nogil
    cdef void clear(self) noexcept nogil
    cdef size_t memory_bytes(self) noexcept nogil


# What the matchers of one (Rules, Vocab) pair share: the parts above, under one lock.
cdef class MatchContext:
    cdef readonly Rules rules
    cdef readonly object vocab
    cdef readonly DecodedVocab decoded
    cdef PyThread_type_lock lock
    cdef StackPool pool
    cdef StackSets sets
    cdef TrieWalk walk
    cdef SegmentCache segments
    cdef MaskCache masks
    cdef vector[token_t] eog_tokens
    cdef unordered_set[int32_t] fast_failed        # sets whose fast mask ran past a bound: reference path only
    cdef readonly int64_t fast_masks, cached_masks, reference_masks
    cdef readonly int64_t fallback_masks           # fast masks that ran past a bound and went to the reference path
    cdef readonly int64_t partial_masks            # masks of states inside a character worked out (not copied)
    cdef readonly int64_t partial_shared           # ... copied from the mask of another open character (a copy)
    cdef object precompute_thread                  # the thread building the segment cache ahead (None: none started)

    # the locked entry points (each takes the lock once; the parts' methods expect it held)
    cdef int initial_stacks(self, vector[node_t]& stacks) except -1 nogil
    cdef int accept_piece(self, const vector[node_t]& stacks, token_t token, const uint32_t* code_points,
                          size_t n_code_points, vector[node_t]& stacks_new) except -1 nogil
    cdef int accept_text(self, vector[node_t]& stacks, const uint32_t* code_points, size_t n_code_points) \
        except -1 nogil
    cdef int reject_tokens(self, const vector[node_t]& stacks, partial_utf8 state, const vocab_view* vocab,
                           const token_t* ids, int64_t n, vector[grammar_candidate]& rejects, bint whole_mask) \
        except -1 nogil
    cdef int mask_into(self, const vector[node_t]& stacks, uint32_t* out) except -1 nogil
    cdef int token_allowed(self, const vector[node_t]& stacks, token_t token) except -1 nogil
    cdef int partial_mask_into(self, const vector[node_t]& stacks, partial_utf8 state, const vocab_view* vocab,
                               const token_t* candidates, int64_t n, uint32_t* out) except -1 nogil
    cdef list stack_elements(self, const vector[node_t]& stacks)
    cdef int forced_bytes(self, const vector[node_t]& start, partial_utf8 partial, size_t max_bytes,
                          vector[uint8_t]& out) except -1 nogil
    cdef int32_t build_frames(self, list frames, bint whole) except -3
    cdef bint transparent_locked(self, position_t pos)
    # the mask of a state (with the GIL): which path answers it
    cdef object rejected_indices(self, const vector[node_t]& stacks, partial_utf8 partial, cnp.ndarray ids,
                                 bint whole_mask)
    cdef bint fast_into(self, const vector[node_t]& stacks, uint32_t* out) except -1
    cdef bint partial_into(self, const vector[node_t]& stacks, partial_utf8 partial, object candidates,
                           uint32_t* out) except -1
    cdef object mask_words(self, const vector[node_t]& stacks, partial_utf8 partial, bint reference)
    # (below: the lock held)
    cdef int fast_mask(self, const vector[node_t]& stacks, const trie_view* trie, uint32_t* out) except -1 nogil
    cdef int path_allowed(self, int32_t set_id, token_t token, const uint32_t* cp, partial_utf8 end) \
            except -1 nogil
    cdef void reserve_headroom(self) noexcept nogil


# ring slots: the states before a matcher's last `capacity` accepted steps
@cython.final
cdef class RollbackRing:
    cdef readonly int capacity
    cdef int head, count                           # slot head is written next; count entries are kept
    cdef vector[vector[node_t]] stacks
    cdef vector[partial_utf8] partial
    cdef vector[uint8_t] flags                     # HISTORY_* bits
    cdef list trigger                              # per slot, lazy matchers only: LazyTrigger.state()
    # a transaction (accept_tokens / validate_tokens): where it started and the entries it overwrote
    cdef bint in_transaction
    cdef int start_head, start_count
    cdef vector[int] saved_slots
    cdef vector[vector[node_t]] saved_stacks
    cdef vector[partial_utf8] saved_partial
    cdef vector[uint8_t] saved_flags
    cdef list saved_trigger

    cdef int push(self, vector[node_t]& stacks, partial_utf8 partial, uint8_t flags, object trigger) except -1
    cdef object take(self, int n, vector[node_t]& stacks, partial_utf8* partial, uint8_t* flags)
    cdef void begin(self)
    cdef void end(self, bint undo)
    cdef void clear(self)
    cdef RollbackRing copy(self)


cdef class Grammar:
    # the matcher's own lock (reentrant: a method may call another), taken around every read or change of
    # its state, before the context's lock and never after it
    cdef PyThread_type_lock state_lock
    cdef unsigned long lock_owner
    cdef int lock_depth
    cdef readonly MatchContext ctx
    cdef readonly Rules rules
    cdef readonly object vocab
    cdef DecodedVocab decoded
    cdef vector[node_t] active_stacks
    cdef partial_utf8 partial
    # lazy grammars (llama_grammar's trigger fields): whether it is one, whether it still waits, and the
    # trigger with the text buffered while waiting (a _triggers.LazyTrigger)
    cdef readonly bint lazy
    cdef readonly bint awaiting_trigger
    cdef object trigger
    # an end-of-generation token was accepted (is_terminated)
    cdef bint eog_accepted
    cdef RollbackRing history

    cdef int enter(self) except -1
    cdef void leave(self) noexcept
    cdef int accept_step(self, token_t token) except -1
    cdef bint try_accept(self, token_t token) except -1


# One row of a batch fill (_batch.pxi): what a pool thread needs to fill it without the GIL.
cdef struct mask_row:
    PyObject* ctx                  # the matcher's MatchContext (borrowed: the batch's list of matchers holds it)
    const vector[node_t]* stacks   # the matcher's stacks (unchanged: the batch holds the matcher's lock)
    uint32_t* out                  # its bitmask row
    const token_t* candidates      # ROW_PARTIAL: the continuation candidates (DecodedVocab's cached array)
    int64_t n_candidates
    vocab_view vocab               # ROW_PARTIAL
    partial_utf8 partial           # ROW_PARTIAL: the open character
    int64_t n_vocab
    int kind                       # ROW_* (_batch.pxi)
    int status                     # 0 written; else answered after the batch, with the GIL


# A batch of logits rows to mask (apply_token_bitmask_inplace): row k of masks onto logits row logit_rows[k].
cdef struct apply_job:
    float* logits
    int64_t logit_stride           # floats from one logits row to the next
    const int64_t* logit_rows
    int64_t n_columns
    const uint32_t* masks
    int64_t mask_stride            # words from one bitmask row to the next
    int64_t width                  # words per bitmask row


# the process's pool of mask threads: the calling thread and `threads` of these fill a batch's rows
@cython.final
cdef class BatchPool:
    cdef batch_pool* pool
    cdef readonly int pid          # the process that made it (a forked child makes its own)
    cdef list threads

    cdef int grow(self, int helpers) except -1
    cdef void run(self, batch_task task, void* job, int64_t n_items, int helpers) noexcept nogil
