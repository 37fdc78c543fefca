"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

llama-server's reasoning budget (``common/reasoning-budget.cpp``): ``ReasoningBudget`` counts the tokens of a
reasoning block and, when the budget runs out, forces the end of the block token by token; ``_TokenMatcher`` is
its token matcher over ``common_aho_corasick``. Plain Python (a few dictionary steps per token); the
``Sampler`` of ``bankml.sampling._sampler`` applies it before the chain. Must not import ``_sampler``.
"""

import numpy as np

from bankml.sampling.params import INT32_MAX

__all__ = [
    "ReasoningBudget",
    "REASONING_BUDGET_IDLE",
    "REASONING_BUDGET_COUNTING",
    "REASONING_BUDGET_FORCING",
    "REASONING_BUDGET_WAITING_UTF8",
    "REASONING_BUDGET_DONE",
]


class _TokenMatcher:
    """reasoning-budget.cpp's token_matcher over common_aho_corasick (common/trie.cpp): advance(token) gives
    the index of the longest sequence ending at this token (and restarts), or -1."""

    def __init__(self, seqs):
        self.seqs = []
        for seq in seqs:
            seq = tuple(int(t) for t in seq)
            if seq and seq not in self.seqs:
                self.seqs.append(seq)
        children = [{}]
        pattern = [-1]
        for index, seq in enumerate(self.seqs):
            node = 0
            for t in seq:
                child = children[node].get(t)
                if child is None:
                    child = len(children)
                    children[node][t] = child
                    children.append({})
                    pattern.append(-1)
                node = child
            if pattern[node] < 0:
                pattern[node] = index
        fail = [0] * len(children)
        order = []
        queue = [0]
        head = 0
        while head < len(queue):
            u = queue[head]
            head += 1
            order.append(u)
            for ch in sorted(children[u]):  # std::map iterates in key order
                v = children[u][ch]
                if u != 0:
                    f = fail[u]
                    while f and ch not in children[f]:
                        f = fail[f]
                    it = children[f].get(ch)
                    fail[v] = it if it is not None and it != v else 0
                queue.append(v)
        match = [-1] * len(children)
        for u in order:
            match[u] = pattern[u] if pattern[u] >= 0 else (match[fail[u]] if u != 0 else -1)
        self._children = children
        self._fail = fail
        self._match = match
        self.state = 0

    def advance(self, token):
        state = self.state
        children = self._children
        while state and token not in children[state]:
            state = self._fail[state]
        state = children[state].get(token, 0)
        p = self._match[state]
        self.state = 0 if p >= 0 else state
        return p

    def reset(self):
        self.state = 0

    def clone(self):
        other = _TokenMatcher.__new__(_TokenMatcher)
        other.__dict__.update(self.__dict__)
        return other


REASONING_BUDGET_IDLE = "idle"
REASONING_BUDGET_COUNTING = "counting"
REASONING_BUDGET_FORCING = "forcing"
REASONING_BUDGET_WAITING_UTF8 = "waiting_utf8"
REASONING_BUDGET_DONE = "done"
_REASONING_STATES = (
    REASONING_BUDGET_IDLE,
    REASONING_BUDGET_COUNTING,
    REASONING_BUDGET_FORCING,
    REASONING_BUDGET_WAITING_UTF8,
    REASONING_BUDGET_DONE,
)
_ATTR_UNKNOWN_OR_CONTROL = (1 << 0) | (1 << 3)


def _utf8_is_complete(piece):
    # common_utf8_is_complete (common/unicode.cpp)
    if not piece:
        return True
    for i in range(1, min(4, len(piece)) + 1):
        c = piece[len(piece) - i]
        if (c & 0xC0) != 0x80:
            expected = 4 if c >= 0xF0 else 3 if c >= 0xE0 else 2 if c >= 0xC0 else 1
            return i >= expected
    return False


class ReasoningBudget:
    """llama-server's reasoning budget (common_reasoning_budget_init, common/reasoning-budget.cpp): counts the
    tokens of a reasoning block and, when the budget runs out, forces ``forced`` token by token.

    States: idle (watching for any of ``start`` -- token sequences), counting (``budget`` tokens left,
    watching for any of ``end``), waiting_utf8 (budget spent inside a UTF-8 character), forcing, done (re-armed
    by a new start sequence). ``vocab`` (a Vocab, or None) answers whether a token's piece -- rendered as
    ``common_token_to_piece(..., special=false)`` renders it: unknown and control tokens spell nothing -- ends
    a UTF-8 character. ``budget`` <= 0 forces as soon as the block starts; llama-server passes INT_MAX for its
    unlimited -1 (``reasoning_budget_tokens``). Give it to ``Sampler`` as
    ``reasoning_budget=``: it constrains the candidates before the grammar and the chain, and sees every
    generated token and the prefill tokens.
    """

    def __init__(self, vocab, start, end, forced, budget, initial_state=REASONING_BUDGET_IDLE):
        if initial_state not in _REASONING_STATES:
            raise ValueError(f"Invalid initial_state: expected one of {_REASONING_STATES}, got {initial_state!r}")
        budget = int(budget)
        if not -(2**31) <= budget <= INT32_MAX:
            raise ValueError(f"Invalid budget: expected a 32-bit integer, got {budget}")
        self.vocab = vocab
        self.start_matcher = _TokenMatcher(start)
        self.end_matcher = _TokenMatcher(end)
        self.forced = tuple(int(t) for t in forced)
        self.budget = budget
        self.remaining = budget
        if initial_state == REASONING_BUDGET_COUNTING and budget <= 0:
            initial_state = REASONING_BUDGET_FORCING
        self.state = initial_state
        self.force_pos = 0
        self._end_match = -1
        attrs = getattr(vocab, "token_attrs", None) if vocab is not None else None
        self._attrs = attrs

    @property
    def end_match(self):
        """The end sequence that moved the budget to done (common_reasoning_budget_get_end_match), or None."""
        return None if self._end_match < 0 else self.end_matcher.seqs[self._end_match]

    @property
    def forced_token(self):
        """The token apply() forces now, or None."""
        if self.state != REASONING_BUDGET_FORCING or self.force_pos >= len(self.forced):
            return None
        return self.forced[self.force_pos]

    def _utf8_complete(self, token):
        if self.vocab is None:
            return True
        if self._attrs is not None and 0 <= token < len(self._attrs) and self._attrs[token] & _ATTR_UNKNOWN_OR_CONTROL:
            return True
        return _utf8_is_complete(self.vocab.piece(token))

    def _arm(self):
        self.state = REASONING_BUDGET_COUNTING
        self.remaining = self.budget
        if self.remaining <= 0:
            self.state = REASONING_BUDGET_FORCING
            self.force_pos = 0

    def accept(self, token):
        """common_reasoning_budget_accept."""
        token = int(token)
        state = self.state
        if state == REASONING_BUDGET_IDLE:
            if self.start_matcher.advance(token) >= 0:
                self._arm()
        elif state == REASONING_BUDGET_COUNTING or state == REASONING_BUDGET_WAITING_UTF8:
            match = self.end_matcher.advance(token)
            if match >= 0:
                self.state = REASONING_BUDGET_DONE
                self._end_match = match
                return
            complete = self._utf8_complete(token)
            if state == REASONING_BUDGET_WAITING_UTF8:
                if complete:
                    self.state = REASONING_BUDGET_FORCING
                    self.force_pos = 0
                    self.end_matcher.reset()
            else:
                self.remaining -= 1
                if self.remaining <= 0:
                    self.state = REASONING_BUDGET_FORCING if complete else REASONING_BUDGET_WAITING_UTF8
                    if complete:
                        self.force_pos = 0
                    self.end_matcher.reset()
        elif state == REASONING_BUDGET_FORCING:
            match = self.end_matcher.advance(token)
            self.force_pos += 1
            if self.force_pos >= len(self.forced):
                self.state = REASONING_BUDGET_DONE
                self._end_match = match
        else:  # done: a new start sequence re-arms it
            if self.start_matcher.advance(token) >= 0:
                self.state = REASONING_BUDGET_COUNTING
                self.remaining = self.budget
                self.end_matcher.reset()
                self._end_match = -1
                if self.remaining <= 0:
                    self.state = REASONING_BUDGET_FORCING
                    self.force_pos = 0

    def apply(self, logits):
        """common_reasoning_budget_apply on a float32 logits array, in place: while forcing, every logit but the
        forced token's becomes -inf."""
        forced = self.forced_token
        if forced is None:
            return logits
        keep = logits[forced] if 0 <= forced < logits.shape[0] else None
        logits[:] = -np.inf
        if keep is not None:
            logits[forced] = keep
        return logits

    def force(self):
        """common_reasoning_budget_force: from counting, start forcing now; True if it did."""
        if self.state != REASONING_BUDGET_COUNTING:
            return False
        self.state = REASONING_BUDGET_FORCING
        self.force_pos = 0
        self.end_matcher.reset()
        return True

    def reset(self):
        self.state = REASONING_BUDGET_IDLE
        self.remaining = self.budget
        self.start_matcher.reset()
        self.end_matcher.reset()
        self.force_pos = 0
        self._end_match = -1

    def clone(self):
        other = ReasoningBudget.__new__(ReasoningBudget)
        other.__dict__.update(self.__dict__)
        other.start_matcher = self.start_matcher.clone()
        other.end_matcher = self.end_matcher.clone()
        return other
