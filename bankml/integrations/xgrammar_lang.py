"""Ports semantics of XGrammar (https://github.com/mlc-ai/xgrammar), Apache License 2.0, Copyright (c) 2024 by Contributors.

XGrammar's TagDispatch, written as llama.cpp GBNF (code points, as bankml's matcher reads them), and what the
modules of XGrammar's other languages share (``xgrammar_ebnf``: its EBNF dialect; ``xgrammar_regex``: its regex
dialect):

* ``dispatch_rules``: XGrammar's TagDispatch, free text that hands over to a rule after a trigger and must not
  contain an excluded string. XGrammar builds it as a trie of the triggers and excludes with Aho-Corasick
  back edges (``TrieFSMBuilder`` with ``add_back_edges``); this module builds the same automaton over code
  points (XGrammar's is over UTF-8 bytes, the same machine on valid UTF-8: a pattern starts at a lead byte)
  and writes one GBNF rule per state. What that automaton does is XGrammar's language (0.2.8, the one vLLM 0.32
  pins), quirks included: a state that completes a trigger keeps only its trie children (a trigger that is a
  prefix of another trigger or of an exclude may go on as free text), an exclude is found wherever it ends
  (a state whose failure link is dead is dead) but a trigger only where the trie path spells it, and free
  text may end in any state that completes no pattern.
* ``RuleSet``: the GBNF rules of one grammar; ``literal`` and ``char_class``: GBNF text for code points;
  ``parse_escape``: XGrammar's escape sequences; ``XGrammarSyntaxError``.

This module owns no JSON schema and no structural tag (``bankml.integrations.structural_tag`` does): it must not
import them, nor any engine.
"""

import re

__all__ = [
    "MAX_DISPATCH_WORK",
    "MAX_REPETITION",
    "NEVER",
    "RuleSet",
    "XGrammarSyntaxError",
    "char_class",
    "dispatch_rules",
    "literal",
    "parse_escape",
    "HEX",
    "MAX_CODE_POINT",
]

MAX_REPETITION = 2000
MAX_CODE_POINT = 0x10FFFF
# a TagDispatch's automaton is built state by state over its alphabet (as XGrammar's over 256 bytes): bounded, so
# that a hostile request cannot hold a worker (about a second of Python at the bound)
MAX_DISPATCH_WORK = 1_000_000
# matches no code point (an empty positive class "[]" would match the empty string in llama.cpp's parser)
NEVER = "[^\\x00-\\U0010FFFF]"


class XGrammarSyntaxError(ValueError):
    """Text XGrammar's EBNF or regex reader refuses, or a construct GBNF cannot express."""


# -- GBNF text


def _escape(cp, in_class):
    if 0x30 <= cp <= 0x39 or 0x41 <= cp <= 0x5A or 0x61 <= cp <= 0x7A or cp == 0x20:
        return chr(cp)
    if not in_class and chr(cp) in "!#$%&'()*+,-./:;<=>?@[]^_`{|}~":
        return chr(cp)
    if cp <= 0xFF:
        return "\\x%02X" % cp
    if cp <= 0xFFFF:
        return "\\u%04X" % cp
    return "\\U%08X" % cp


def literal(text):
    """A GBNF string literal matching ``text`` exactly (every code point spelled so the parser reads it back)."""
    return '"' + "".join(_escape(ord(c), False) for c in text) + '"'


def char_class(ranges, negated=False):
    """A GBNF class of the code-point ranges ``[(first, last), ...]`` (or its complement): ``NEVER`` for an
    empty positive class, ``.`` for an empty negated one."""
    if not ranges:
        return "." if negated else NEVER
    parts = []
    for first, last in ranges:
        parts.append(_escape(first, True) if first == last else _escape(first, True) + "-" + _escape(last, True))
    return ("[^" if negated else "[") + "".join(parts) + "]"


def _ranges(code_points):
    out = []
    for cp in sorted(set(code_points)):
        if out and out[-1][1] + 1 == cp:
            out[-1][1] = cp
        else:
            out.append([cp, cp])
    return [tuple(r) for r in out]


class RuleSet:
    """The GBNF rules of one grammar: unique names (``[a-zA-Z0-9-]``) made from hints. ``add_rule`` follows
    the converter builder's contract that ``bankml.schema.StrictGrammarBuilder`` writes through (the same
    name for the same body; a taken name gets a suffix)."""

    def __init__(self):
        self.rules = {}

    def name(self, hint):
        """A fresh rule name from ``hint`` (reserved with an empty body until ``set``)."""
        base = re.sub(r"[^a-zA-Z0-9-]+", "-", hint).strip("-") or "r"
        name, i = base, 0
        while name in self.rules or name == "root":
            i += 1
            name = "%s-%d" % (base, i)
        self.rules[name] = None
        return name

    def set(self, name, body):
        self.rules[name] = body
        return name

    def add(self, hint, body):
        return self.set(self.name(hint), body)

    def add_rule(self, name, body):
        known = self.rules.get(name)
        if known == body or (known is None and name in self.rules):  # the same rule, or a name reserved for it
            return self.set(name, body)
        if name in self.rules or name == "root":
            name = self.name(name)
        return self.set(name, body)

    def text(self, root_body):
        lines = ["root ::= " + root_body]
        for name, body in self.rules.items():
            if body is None:  # pragma: no cover - every reserved name is set before the grammar is written
                raise AssertionError("rule %s has no body" % name)
            lines.append("%s ::= %s" % (name, body))
        return "\n".join(lines) + "\n"


# -- TagDispatch


def dispatch_rules(rules, hint, triggers, loop, excludes):
    """XGrammar's TagDispatch as GBNF rules in ``rules``; returns the name of its start rule.

    ``triggers``: ``[(trigger text, GBNF expression dispatched after it), ...]`` (the expression, a rule
    name or a sequence, matches what follows the trigger); ``loop``: back to free text after the dispatched
    expression (else the text ends there); ``excludes``: strings the free text must not contain."""
    patterns = [t for t, _ in triggers] + list(excludes)
    children = [{}]
    ends = set()
    trigger_ends = []
    dead = set()
    for index, pattern in enumerate(patterns):
        state = 0
        for ch in pattern:
            cp = ord(ch)
            nxt = children[state].get(cp)
            if nxt is None:
                nxt = len(children)
                children.append({})
                children[state][cp] = nxt
            state = nxt
        ends.add(state)
        if index < len(triggers):
            trigger_ends.append(state)
        else:
            dead.add(state)
    alphabet = sorted({ord(ch) for p in patterns for ch in p})
    if len(children) * max(1, len(alphabet)) > MAX_DISPATCH_WORK:
        raise XGrammarSyntaxError(
            "the triggers and excludes are too large to compile: %d automaton states times %d distinct characters "
            "is past %d" % (len(children), len(alphabet), MAX_DISPATCH_WORK)
        )
    order = [0]
    for u in order:
        order.extend(children[u][cp] for cp in sorted(children[u]))
    fail = [0] * len(children)
    delta = [dict(c) for c in children]
    for u in order:
        # XGrammar 0.2.8: a state whose failure state is dead has completed an exclude as a suffix: dead too
        if fail[u] in dead:
            dead.add(u)
        for cp in alphabet:
            child = children[u].get(cp)
            fallback = 0 if u == 0 else delta[fail[u]].get(cp, 0)
            if child is None:
                delta[u][cp] = fallback
            else:
                fail[child] = fallback
    # the edges XGrammar keeps: a completing state (not the start) only its trie children; none into a dead state
    edges = []
    for u in range(len(children)):
        row = children[u] if (u != 0 and u in ends) else delta[u]
        edges.append({cp: v for cp, v in row.items() if v not in dead})
    defaults = [u == 0 or u not in ends for u in range(len(children))]  # code points outside the alphabet go to 0
    names = {}

    def state_name(u):
        if u not in names:
            names[u] = rules.name(hint if u == 0 else "%s-s%d" % (hint, u))
        return names[u]

    dispatched = {}
    for (_, expression), state in zip(triggers, trigger_ends):
        dispatched.setdefault(state, []).append(expression)
    pending, seen = [0], {0}
    reachable_start = 0 not in dead
    while pending:
        u = pending.pop()
        alternatives = []
        if u not in ends:
            alternatives.append('""')
        for expression in dispatched.get(u, ()):
            alternatives.append(expression + (" " + state_name(0) if loop else ""))
            if loop and 0 not in seen:
                seen.add(0)
                pending.append(0)
        by_target = {}
        for cp, v in edges[u].items():
            by_target.setdefault(v, []).append(cp)
        if defaults[u] and reachable_start:
            # every code point that does not leave for another state returns to the start
            specific = [cp for cp in alphabet if edges[u].get(cp, -1) != 0]
            alternatives.append(char_class(_ranges(specific), negated=True) + " " + state_name(0))
            by_target.pop(0, None)
            if 0 not in seen:
                seen.add(0)
                pending.append(0)
        for v in sorted(by_target):
            alternatives.append(char_class(_ranges(by_target[v])) + " " + state_name(v))
            if v not in seen:
                seen.add(v)
                pending.append(v)
        if not alternatives:
            alternatives.append(NEVER)
        rules.set(state_name(u), " | ".join(alternatives))
    return state_name(0)


# -- XGrammar's escapes


C_ESCAPES = {
    "'": 0x27,
    '"': 0x22,
    "?": 0x3F,
    "\\": 0x5C,
    "/": 0x2F,
    "a": 0x07,
    "b": 0x08,
    "f": 0x0C,
    "n": 0x0A,
    "r": 0x0D,
    "t": 0x09,
    "v": 0x0B,
    "0": 0x00,
    "e": 0x1B,
}
HEX = "0123456789abcdefABCDEF"


def parse_escape(text, pos, extra=None):
    """XGrammar's ParseNextEscaped at ``text[pos] == '\\'``: (code point, length) or None for an invalid one."""
    if pos + 1 >= len(text) or ord(text[pos + 1]) > 128:
        return None
    e = text[pos + 1]
    if extra and e in extra:
        return extra[e], 2
    if e in C_ESCAPES:
        return C_ESCAPES[e], 2
    if e == "x":
        end = pos + 2
        while end < len(text) and text[end] in HEX:
            end += 1
        if end == pos + 2:
            return None
        return int(text[pos + 2 : end], 16), end - pos
    if e in "uU":
        width = 4 if e == "u" else 8
        digits = text[pos + 2 : pos + 2 + width]
        if len(digits) != width or any(d not in HEX for d in digits):
            return None
        return int(digits, 16), 2 + width
    return None
