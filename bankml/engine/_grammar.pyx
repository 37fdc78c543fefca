# cython: language_level=3
"""The GBNF engine: flat rules, persistent stacks, and llama.cpp's matcher.

Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License,
Copyright (c) 2023-2026 The ggml authors: src/llama-grammar.cpp
(llama_grammar_advance_stack, match_char, match_partial_char, match_token,
accept_chr, accept_token, accept_str, reject_candidates(_for_stack),
llama_grammar_apply_impl, llama_grammar_accept_impl with lazy triggers).

Owns: the matcher's stacks (hash-consed nodes of a persistent tree, so a stack is one
integer), its partial UTF-8 state and its trigger state, and what the matchers of one
(Rules, Vocab) pair share. The parts live one per included file, each owning one kind
of id: _stacks.pxi (StackPool: node ids), _stacksets.pxi (StackSets: set ids),
_walk.pxi (TrieWalk: trie positions), _segments.pxi (SegmentCache: entry ids),
_maskcache.pxi (MaskCache: mask slots), _context.pxi (MatchContext, their composition
under one lock), _precompute.pxi (the build ahead of use), _rollback.pxi
(RollbackRing: ring slots), _matcher.pxi (Grammar) and _batch.pxi (a batch's rows in one
call: BatchPool and its threads). This file holds the bounds and sentinels they share and
the module-level helpers. It must not parse text (_rules and
its _gbnf.pxi do) nor read vocabulary files (vocab.py does).
"""
import bisect
import collections
import heapq
import operator
import os
import threading
import time

import numpy as np
cimport numpy as cnp
cimport cython
from cpython.bytes cimport PyBytes_AS_STRING
from cpython.exc cimport PyErr_Clear
from cpython.ref cimport PyObject
from cpython.pythread cimport (PyThread_acquire_lock, PyThread_allocate_lock, PyThread_free_lock,
                               PyThread_get_thread_ident, PyThread_release_lock)
from libc.math cimport INFINITY
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from cython.operator cimport dereference as deref
from libcpp.algorithm cimport find, lower_bound, sort, unique, upper_bound
from libc.string cimport memcmp, memcpy, memset
from libcpp.utility cimport pair
from libcpp.vector cimport vector

from bankml.engine._typedefs cimport element_value_t, node_t, offset_t, position_t, token_t
from bankml.engine._utf8 cimport decode_utf8, partial_utf8
from bankml.engine._trie cimport (CHILD_BLOCK, SUBTREE_NON_ASCII, SUBTREE_ODD, SUBTREE_OVERLONG_END, SUBTREE_PARTIAL_END,
                                  is_odd_code_point)
from bankml.engine._bits cimport (clear_masked_counted, clear_position_range, clear_range_counted, clz64, ctz64, drain_words,
                           has_position, next_set_position, next_unset_position, popcount64, position_drain, prefetch,
                           range_has_marks, set_position, set_position_range, set_token_bit, clear_token_bit,
                           words_hash)
from bankml.engine._charclass cimport (MAX_CODE_POINT, class_accepts_all_partials, class_ascii_bits, class_constant_from,
                                class_alternatives, class_intervals, class_next_range, first_interval_reaching,
                                is_positive_class,
                                is_end_of_sequence, is_token_element, match_char, match_partial_char, match_token,
                                partial_char_range)
from bankml.engine._rules cimport make_rules, rules_nullable_of

from bankml.errors import GrammarError
from bankml.engine._triggers import LazyTrigger
from bankml.engine._trie import decoded_vocab, vocab_trie
from bankml.engine import _rules

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
# built by then is built on first use. None by default: measured side by side on 500 MaskBench schemas
# (bench/maskbench.py, engines bankml and bankml-bg; docs/PERFORMANCE.md), a thread building beside the
# walk made every wall-clock figure worse, TTFM p50 0.66 -> 1.87 ms, cold p99 259 -> 730 us, warm max
# 1.3 -> 11 ms (a mask waits for the context's lock while it builds a whole entry, and for the GIL while
# it plans), and bought nothing on the CPU clock (cold p99 254 against 302 us).
# A runtime with an idle core while it evaluates the prompt can ask for it (precompute=0.03, or
# g.context.start_precompute(0.03)).
DEFAULT_PRECOMPUTE_SECONDS = 0.0
# How many accepted steps a matcher can roll back by default: vLLM rolls back its draft tokens (at most
# num_speculative_tokens), SGLang's jump-forward the retokenized tail (its XGrammar backend keeps 200).
# A step costs a copy of the stack ids (a few integers), so the ring is cheap.
DEFAULT_MAX_ROLLBACK = 200
# The most bytes jump_forward() returns (a grammar such as `root ::= "a" root` forces text forever).
DEFAULT_MAX_JUMP_FORWARD_BYTES = 4096

# The background build lets other threads have the GIL every this many steps of its Python planning.
cdef int PLANNING_STEPS_PER_YIELD = 256
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


# The conventions of the set summaries (NO_SET, RUN_UNKNOWN, VIABLE_UNKNOWN) are _stacksets.pxd's.
# run_length of a run that never ends (it reaches a set that loops)
cdef int32_t RUN_UNBOUNDED = 1 << 30

# partial_mask_into's key for a character open on a value that cannot matter (any value < 2^21 is real)
cdef enum:
    SHARED_PARTIAL_VALUE = 1 << 21

# The element_flags bits (ELEMENT_*) and LONG_CLASS are _stacksets.pxd's; the entry sentinels (NO_ENTRY, CACHE_FULL) and
# UNION_MIN_BELOW _segments.pxd's.

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


# The engine's parts, one file each (see docs/ARCHITECTURE.md): node ids, set ids, trie positions,
# segment entries, mask slots; the context that composes them; the build ahead of use; the matcher.
include "_stacks.pxi"
include "_stacksets.pxi"
include "_walk.pxi"
include "_segments.pxi"
include "_maskcache.pxi"
include "_context.pxi"
include "_precompute.pxi"
include "_rollback.pxi"
include "_matcher.pxi"
include "_batch.pxi"


def _context_for(Rules rules, vocab, size_t max_stacks, double precompute):
    """The context new matchers of (rules, vocab) join: shared, until its node pool passes a budget.
    A new context builds its segment cache ahead of use for up to `precompute` seconds, in a
    background thread (MatchContext.start_precompute)."""
    key = (id(vocab), max_stacks)
    cdef MatchContext ctx = rules.contexts.get(key)
    if ctx is None or ctx.vocab is not vocab or ctx.pool.nodes.size() > CONTEXT_NODE_BUDGET:
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


def _id_array(int64_t n_vocab, ids, what="ids"):
    ids = np.asarray(ids)
    if ids.ndim != 1 or ids.dtype.kind not in "iu":
        raise ValueError(f"Invalid {what}: expected a 1-D integer array, got {ids.dtype} of shape {ids.shape}")
    if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= n_vocab):
        raise ValueError(f"Invalid {what}: token ids must lie in [0, {n_vocab}), "
                         f"got range [{int(ids.min())}, {int(ids.max())}]")
    return np.ascontiguousarray(ids, dtype=np.int32)


def _token_list(ids, vocab, DecodedVocab decoded):
    """A list of int token ids in [0, n_vocab), or TypeError/ValueError naming what is wrong."""
    if vocab is None:
        raise ValueError("this Grammar has no vocabulary; use accept_token(token_id, piece)")
    if isinstance(ids, (str, bytes, bytearray)) or not hasattr(ids, "__iter__"):
        raise TypeError(f"ids must be a sequence of token ids, got {type(ids).__name__}")
    if isinstance(ids, np.ndarray):
        if ids.ndim != 1 or ids.dtype.kind not in "iu":
            raise ValueError(f"Invalid ids: expected a 1-D integer array, got {ids.dtype} of shape {ids.shape}")
        ids = ids.tolist()
    tokens = [t if type(t) is int else _token_id(t) for t in ids]
    cdef int64_t n_vocab = decoded.n_vocab
    for t in tokens:
        if not 0 <= t < n_vocab:
            raise ValueError(f"Invalid token id: {t} is outside [0, {n_vocab})")
    return tokens


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


def _spell_forced(bytes forced, vocab, DecodedVocab decoded):
    """jump_forward_tokens' spelling of the forced bytes (XGrammar's find_jump_forward_tokens): the longest
    ordinary piece at each point, greedily, the last dropped when a longer ordinary piece starts with it."""
    by_piece, ordered, longest = _ordinary_pieces(vocab, decoded)
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


def _bitmask_row(bitmask, index, width):
    """Row `index` of an int32 bitmask of shape (width,) or (batch, width): a numpy array or a CPU torch
    tensor, viewed without a copy; ValueError naming what is wrong otherwise."""
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
    return row


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


def _flat_map_replay(ops):
    """Test shim of _flatmap.h: replay ops on a flat_map[uint64_t, int64_t] -- (0, key, value) sets,
    (1, key, _) finds, (2, _, _) clears, (3, n, _) reserves -- and return each find's value (None: absent)
    and the size after each op."""
    cdef flat_map[uint64_t, int64_t] table
    cdef flat_map[uint64_t, int64_t].iterator it
    out = []
    for op, key, value in ops:
        if op == 0:
            table[<uint64_t>key] = <int64_t>value
        elif op == 1:
            it = table.find(<uint64_t>key)
            out.append(None if it == table.end() else deref(it).second)
        elif op == 2:
            table.clear()
        else:
            table.reserve(<size_t>key)
        out.append(table.size())
    return out
