"""The lazy grammar's trigger: llama.cpp's trigger tokens and patterns (llama_grammar_trigger_pattern).

Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License,
Copyright (c) 2023-2026 The ggml authors: src/llama-grammar.cpp (llama_grammar_accept_impl's
awaiting_trigger branch, llama_grammar_trigger_pattern::find) and common/common.cpp's trigger words.

Owns: the text a lazy grammar has buffered while it waits, where each token's piece lies in it, and
the decision of where the constrained text starts. It must not touch the grammar's stacks (Grammar
replays the pieces this returns). Pure Python: it runs once per token only while a grammar waits.
"""

import re

from bankml.errors import GrammarError


def words_pattern(words):
    """llama.cpp's one pattern from trigger words, with regex metacharacters escaped."""
    escaped = "|".join(re.sub(r"[.^$|()*+?\[\]{}\\]", lambda m: "\\" + m.group(0), w) for w in words)
    return "[\\s\\S]*?(" + escaped + ")[\\s\\S]*"


def ecmascript_to_python(pattern):
    """Rewrite the two constructs whose meaning differs between std::regex (ECMAScript, no multiline)
    and Python's re: `$` matches only at the very end, and `.` matches neither \\n nor \\r."""
    out = bytearray()
    i = 0
    n = len(pattern)
    in_class = False
    while i < n:
        c = pattern[i]
        if c == 0x5C and i + 1 < n:  # backslash: copy the escape as it is
            out += pattern[i : i + 2]
            i += 2
            continue
        if in_class:
            if c == 0x5D:  # ]
                in_class = False
            out.append(c)
        elif c == 0x5B:  # [
            if pattern[i : i + 2] == b"[]":  # ECMAScript's empty class matches nothing
                out += b"(?!)"
                i += 2
                continue
            if pattern[i : i + 3] == b"[^]":  # and its negation matches anything
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


def trigger_start(regex, pattern, buffer):
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


class LazyTrigger:
    """What a lazy grammar waits for (trigger token ids, or patterns over the text so far) and the text
    it has buffered while waiting (llama_grammar's trigger_buffer and trigger_buffer_positions)."""

    __slots__ = ("tokens", "patterns", "regexes", "buffer", "positions")

    def __init__(self, tokens=(), patterns=(), words=()):
        self.tokens = tuple(int(t) for t in tokens)
        patterns = tuple(patterns)
        if words:
            if patterns:
                raise ValueError("give trigger_words or trigger_patterns, not both")
            patterns = (words_pattern(words),)
        self.patterns = patterns
        try:
            self.regexes = [
                re.compile(ecmascript_to_python(p.encode("utf-8") if isinstance(p, str) else p)) for p in patterns
            ]
        except re.error as err:
            raise GrammarError(f"invalid trigger pattern: {err}") from None
        self.buffer = bytearray()
        self.positions = []

    def feed(self, token, piece):
        """Take a token while waiting. Returns the (token, text) pieces the grammar must accept now that
        it is triggered, in order (a trigger token: itself; a pattern: the text from where the match
        starts), or None to keep waiting (the piece is buffered). state() before the call undoes it."""
        if token in self.tokens:
            return [(token, piece)]
        start_of_piece = len(self.buffer)
        self.positions.append((token, start_of_piece, start_of_piece + len(piece)))
        self.buffer += piece
        buffer = bytes(self.buffer)
        for regex, pattern in zip(self.regexes, self.patterns):
            start = trigger_start(regex, pattern, buffer)
            if start is not None:
                return [
                    (tok, buffer[max(tok_start, start) : tok_end])
                    for tok, tok_start, tok_end in self.positions
                    if tok_end > start
                ]
        return None

    def state(self):
        """The buffered text and positions, as a rollback entry keeps them."""
        return bytes(self.buffer), tuple(self.positions)

    def restore(self, state):
        buffer, positions = state
        self.buffer = bytearray(buffer)
        self.positions = list(positions)

    def clear(self):
        self.buffer = bytearray()
        self.positions = []

    def copy(self):
        other = LazyTrigger.__new__(LazyTrigger)
        other.tokens = self.tokens
        other.patterns = self.patterns
        other.regexes = self.regexes
        other.restore(self.state())
        return other
