"""Ports semantics of XGrammar (https://github.com/mlc-ai/xgrammar), Apache License 2.0, Copyright (c) 2024 by Contributors.

XGrammar's own grammar languages, written as llama.cpp GBNF (code points, as bankml's matcher reads them):

* ``dispatch_rules``: XGrammar's TagDispatch, free text that hands over to a rule after a trigger and must not
  contain an excluded string. XGrammar builds it as a trie of the triggers and excludes with Aho-Corasick
  back edges (``TrieFSMBuilder`` with ``add_back_edges``); this module builds the same automaton over code
  points (XGrammar's is over UTF-8 bytes, the same machine on valid UTF-8: a pattern starts at a lead byte)
  and writes one GBNF rule per state. What that automaton does is XGrammar's language (0.2.8, the one vLLM 0.32
  pins), quirks included: a state that completes a trigger keeps only its trie children (a trigger that is a
  prefix of another trigger or of an exclude may go on as free text), an exclude is found wherever it ends
  (a state whose failure link is dead is dead) but a trigger only where the trie path spells it, and free
  text may end in any state that completes no pattern.
* ``EbnfTranslator``: XGrammar's EBNF dialect (``grammar_parser.cc``: rule names with ``_ . -``, C escapes and
  ``\\x`` of any length in strings and classes, ``()`` as the empty string, ``{m,n}``, ``TagDispatch(...)``,
  ``Regex("...")``) to GBNF rules under a prefix. Refused, naming the construct: lookahead assertions
  (``(= ...)``: XGrammar enforces them, GBNF cannot), rule attributes (``name[max_tokens=...]``), the token
  macros (``Token``, ``ExcludeToken``, ``TokenTagDispatch``), ``Substring`` and ``Regex``'s named arguments.
* ``regex_to_ebnf``: XGrammar's regex dialect (``regex_converter.cc``) to its EBNF, which the translator then
  reads, exactly as XGrammar compiles a regex (``Grammar.from_regex`` prints EBNF and parses it back): a whole
  match, ``^``/``$`` ignored, ``.`` any code point, lazy quantifiers as greedy, ``\\d \\w \\s`` ASCII sets.

``RuleSet`` collects the GBNF rules of one grammar. This module owns no JSON schema and no structural tag
(``bankml.integrations.structural_tag`` does): it must not import them, nor any engine.
"""

import re

__all__ = [
    "MAX_REPETITION",
    "EbnfTranslator",
    "RuleSet",
    "XGrammarSyntaxError",
    "char_class",
    "dispatch_rules",
    "literal",
    "regex_to_ebnf",
]

# llama.cpp's MAX_REPETITION_THRESHOLD (bankml.engine.parser): a bounded repetition past it is refused there
MAX_REPETITION = 2000
_MAX_CODE_POINT = 0x10FFFF
_MAX_NESTING = 1000  # XGrammar's max_nest_layer_ for parentheses
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


# -- XGrammar's EBNF


_C_ESCAPES = {
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
_CLASS_ESCAPES = {c: ord(c) for c in "^$\\.*+?()[]{}|/-"}
_HEX = "0123456789abcdefABCDEF"


def _parse_escape(text, pos, extra=None):
    """XGrammar's ParseNextEscaped at ``text[pos] == '\\'``: (code point, length) or None for an invalid one."""
    if pos + 1 >= len(text) or ord(text[pos + 1]) > 128:
        return None
    e = text[pos + 1]
    if extra and e in extra:
        return extra[e], 2
    if e in _C_ESCAPES:
        return _C_ESCAPES[e], 2
    if e == "x":
        end = pos + 2
        while end < len(text) and text[end] in _HEX:
            end += 1
        if end == pos + 2:
            return None
        return int(text[pos + 2 : end], 16), end - pos
    if e in "uU":
        width = 4 if e == "u" else 8
        digits = text[pos + 2 : pos + 2 + width]
        if len(digits) != width or any(d not in _HEX for d in digits):
            return None
        return int(digits, 16), 2 + width
    return None


def _is_name_char(c, first=False):
    return c in "_-." or "a" <= c <= "z" or "A" <= c <= "Z" or (not first and "0" <= c <= "9")


class _Token:
    __slots__ = ("kind", "value", "line", "column")

    def __init__(self, kind, value, line, column):
        self.kind, self.value, self.line, self.column = kind, value, line, column


class _Lexer:
    """XGrammar's EBNF lexer (EBNFLexer), on a Python string (one code point per character)."""

    def __init__(self, text):
        self.text = text
        self.pos = 0
        self.line = 1
        self.column = 1

    def error(self, message, line=None, column=None):
        raise XGrammarSyntaxError(
            "EBNF lexer error at line %d, column %d: %s"
            % (self.line if line is None else line, self.column if column is None else column, message)
        )

    def peek(self, delta=0):
        i = self.pos + delta
        return self.text[i] if i < len(self.text) else ""

    def consume(self, n=1):
        for _ in range(n):
            c = self.peek()
            if c == "\n" or (c == "\r" and self.peek(1) != "\n"):
                self.line += 1
                self.column = 1
            else:
                self.column += 1
            self.pos += 1

    def skip_space(self):
        while self.peek() in (" ", "\t", "#", "\n", "\r") and self.peek():
            if self.peek() == "#":
                while self.peek() and self.peek() not in "\n\r":
                    self.consume()
            else:
                self.consume()

    def tokens(self):
        out = []
        while True:
            self.skip_space()
            line, column = self.line, self.column
            c = self.peek()
            if not c:
                out.append(_Token("eof", "", line, column))
                break
            if c == "(" and self.peek(1) == "=":
                self.consume(2)
                out.append(_Token("lookahead", "(=", line, column))
            elif c in "(){}|,*+?=":
                self.consume()
                out.append(_Token(c, c, line, column))
            elif c == ":":
                if self.peek(1) == ":" and self.peek(2) == "=":
                    self.consume(3)
                    out.append(_Token("::=", "::=", line, column))
                else:
                    self.error("Unexpected character: ':'")
            elif c == '"':
                out.append(self.string(line, column))
            elif c == "[":
                out.append(self.char_class(line, column))
            elif _is_name_char(c, True):
                out.append(self.identifier(line, column))
            elif c.isdigit() or c in "-+":
                out.append(self.integer(line, column))
            else:
                self.error("Unexpected character: " + c)
        for i, token in enumerate(out):
            if token.kind == "::=":
                if i == 0:
                    self.error("Assign should not be the first token", token.line, token.column)
                name = out[i - 1]
                if name.kind != "identifier":
                    self.error("Assign should be preceded by an identifier", name.line, name.column)
                if i >= 2 and out[i - 2].line == name.line:
                    self.error("The rule name should be at the beginning of the line", name.line, name.column)
                name.kind = "rule_name"
        return out

    def identifier(self, line, column):
        start = self.pos
        while self.peek() and _is_name_char(self.peek(), self.pos == start):
            self.consume()
        name = self.text[start : self.pos]
        if name in ("true", "false"):
            return _Token("boolean", name == "true", line, column)
        if self.peek() == "[":
            # an attribute block before "::=" (name[max_tokens=...] ::=) is a rule attribute, else a class
            close = self.text.find("]", self.pos)
            after = self.text[close + 1 :].lstrip(" \t") if close >= 0 else ""
            if close >= 0 and "\n" not in self.text[self.pos : close] and after.startswith("::="):
                raise XGrammarSyntaxError(
                    "rule attributes (%s%s) are not supported: token and character budgets, captures and "
                    "temperatures have no GBNF equivalent" % (name, self.text[self.pos : close + 1])
                )
        return _Token("identifier", name, line, column)

    def string(self, line, column):
        self.consume()
        cps = []
        while self.peek() and self.peek() not in '"\n\r':
            if self.peek() == "\\":
                parsed = _parse_escape(self.text, self.pos)
                if parsed is None:
                    self.error("Invalid escape sequence")
                cp, n = parsed
            else:
                cp, n = ord(self.peek()), 1
            self.consume(n)
            cps.append(cp)
        if self.peek() != '"':
            self.error('Expect " in string literal')
        self.consume()
        return _Token("string", cps, line, column)

    def char_class(self, line, column):
        items = []  # ("char", cp) | ("dash", "-") | ("escape", letter)
        self.consume()
        negated = False
        if self.peek() == "^":
            negated = True
            self.consume()
        while self.peek() and self.peek() != "]":
            c = self.peek()
            if c in "\r\n":
                self.error("Character class should not contain newline")
            elif c == "-":
                items.append(("dash", 0x2D))
                self.consume()
            elif c == "\\" and self.peek(1) in ("d", "D", "s", "S", "w", "W") and self.peek(1):
                items.append(("escape", self.peek(1)))
                self.consume(2)
            else:
                if c == "\\":
                    parsed = _parse_escape(self.text, self.pos, _CLASS_ESCAPES)
                    if parsed is None:
                        self.error("Invalid escape sequence" + self.text[self.pos : self.pos + 2])
                    cp, n = parsed
                else:
                    cp, n = ord(c), 1
                items.append(("char", cp))
                self.consume(n)
        if not self.peek():
            self.error("Unterminated character class")
        self.consume()
        return _Token("class", (negated, items), line, column)

    def integer(self, line, column):
        negative = self.peek() == "-"
        if self.peek() in "-+":
            self.consume()
        value = 0
        while self.peek() and self.peek().isdigit():
            value = value * 10 + int(self.peek())
            self.consume()
            if value > 10**15:
                self.error("Integer is too large: parsed %d, max allowed is 1000000000000000" % value)
        return _Token("integer", -value if negative else value, line, column)


class EbnfTranslator:
    """XGrammar's EBNF dialect to GBNF rules in a ``RuleSet`` (``translate(text, root, prefix)`` returns the
    GBNF name standing for the grammar's root rule). XGrammarSyntaxError for what XGrammar's parser refuses
    (its message) or what GBNF cannot express (the construct named)."""

    def __init__(self, rules):
        self.rules = rules

    def translate(self, text, root="root", prefix="grammar"):
        tokens = _Lexer(text).tokens()
        self.tokens = tokens
        self.i = 0
        self.depth = 0
        self.prefix = prefix
        self.names = {}
        for token in tokens:
            if token.kind == "rule_name":
                if token.value in self.names:
                    self.error('Rule "%s" is defined multiple times' % token.value, token)
                self.names[token.value] = self.rules.name("%s-%s" % (prefix, token.value))
        if root not in self.names:
            raise XGrammarSyntaxError('EBNF parser error: the root rule with name "%s" is not found' % root)
        while self.peek().kind != "eof":
            self.rule()
        return self.names[root]

    def peek(self, delta=0):
        return self.tokens[min(self.i + delta, len(self.tokens) - 1)]

    def error(self, message, token=None):
        token = token or self.peek()
        raise XGrammarSyntaxError("EBNF parser error at line %d, column %d: %s" % (token.line, token.column, message))

    def expect(self, kind, message):
        if self.peek().kind != kind:
            self.error(message)
        self.i += 1
        return self.tokens[self.i - 1]

    def rule(self):
        name = self.expect("rule_name", "Expect rule name")
        self.expect("::=", "Expect ::=")
        body = self.choices()
        if self.peek().kind == "lookahead":
            self.error(
                "lookahead assertions ((= ...)) are not supported: XGrammar enforces them and GBNF has none "
                "(rule %s)" % name.value
            )
        self.rules.set(self.names[name.value], body)

    def choices(self):
        alternatives = [self.sequence()]
        while self.peek().kind == "|":
            self.i += 1
            alternatives.append(self.sequence())
        return " | ".join(alternatives)

    def sequence(self):
        elements = [self.quantified()]
        while self.peek().kind not in ("|", ")", "lookahead", "rule_name", "eof"):
            elements.append(self.quantified())
        return " ".join(elements)

    def quantified(self):
        element = self.element()
        kind = self.peek().kind
        if kind in ("*", "+", "?"):
            self.i += 1
            return "(" + element + ")" + kind
        if kind == "{":
            lower, upper = self.repetition()
            if lower > MAX_REPETITION or (upper is not None and upper > MAX_REPETITION):
                self.error(
                    "a repetition bound past %d is not supported (llama.cpp's grammar parser refuses it)"
                    % MAX_REPETITION
                )
            if upper is None:
                return "(%s){%d,}" % (element, lower)
            return "(%s){%d,%d}" % (element, lower, upper)
        return element

    def integer(self):
        if self.peek().kind != "integer":
            self.error("Expect integer, but got " + str(self.peek().value))
        self.i += 1
        return self.tokens[self.i - 1].value

    def repetition(self):
        self.expect("{", "Expect {")
        lower = self.integer()
        if lower < 0:
            self.error("Lower bound cannot be negative", self.tokens[self.i - 1])
        if self.peek().kind == ",":
            self.i += 1
            if self.peek().kind == "}":
                self.i += 1
                return lower, None
            upper = self.integer()
            if upper == -1:
                self.expect("}", "Expect }")
                return lower, None
            if upper < lower:
                self.error("Lower bound is larger than upper bound: %d > %d" % (lower, upper), self.tokens[self.i - 1])
            self.expect("}", "Expect }")
            return lower, upper
        if self.peek().kind == "}":
            self.i += 1
            return lower, lower
        self.error("Expect ',' or '}' in repetition range")

    def element(self):
        token = self.peek()
        if token.kind == "(":
            self.depth += 1
            if self.depth > _MAX_NESTING:
                self.error("Nest layer exceeded the maximum limit")
            self.i += 1
            if self.peek().kind == ")":
                self.i += 1
                self.depth -= 1
                return '""'
            body = self.choices()
            self.expect(")", "Expect )")
            self.depth -= 1
            return "(" + body + ")"
        if token.kind == "class":
            self.i += 1
            return self.char_class(token)
        if token.kind == "string":
            self.i += 1
            for cp in token.value:
                if cp > _MAX_CODE_POINT or 0xD800 <= cp <= 0xDFFF:
                    self.error("code point U+%X is not a Unicode scalar value" % cp, token)
            return literal("".join(chr(cp) for cp in token.value))
        if token.kind == "identifier":
            if token.value == "TagDispatch":
                return self.tag_dispatch()
            if token.value == "Regex":
                return self.regex_macro()
            if token.value in ("Token", "ExcludeToken", "TokenTagDispatch", "Substring"):
                self.error("the %s macro is not supported (no GBNF equivalent in bankml)" % token.value)
            self.i += 1
            if token.value not in self.names:
                self.error('Rule "%s" is not defined' % token.value, token)
            return self.names[token.value]
        self.error("Expect element, but got " + str(token.value))

    def char_class(self, token):
        negated, items = token.value
        ranges = []
        k = 0
        while k < len(items):
            kind, value = items[k]
            if kind == "escape":
                self.error("Character class escape is not supported yet in EBNF", token)
            if k + 2 < len(items) and items[k + 1][0] == "dash" and items[k + 2][0] in ("char", "dash"):
                last = items[k + 2][1]
                if value > last:
                    self.error("Invalid character class: lower bound is larger than upper bound", token)
                ranges.append((value, last))
                k += 3
            else:
                ranges.append((value, value))
                k += 1
        for first, last in ranges:
            if last > _MAX_CODE_POINT:
                self.error("code point U+%X is past U+10FFFF" % last, token)
        return char_class(_merge(ranges), negated)

    # -- macros

    def macro_arguments(self):
        self.expect("(", "Expect ( after macro function name")
        positional, named = [], {}
        if self.peek().kind != ")":
            while True:
                if self.peek().kind == "identifier" and self.peek(1).kind == "=":
                    key = self.peek().value
                    self.i += 2
                    named[key] = self.macro_value()
                else:
                    positional.append(self.macro_value())
                if self.peek().kind == ",":
                    self.i += 1
                elif self.peek().kind == ")":
                    break
                else:
                    self.error("Expect , or ) in macro arguments")
        self.expect(")", "Expect ) after macro arguments")
        return positional, named

    def macro_value(self):
        token = self.peek()
        if token.kind in ("string", "integer", "boolean", "identifier"):
            self.i += 1
            return token.kind, token.value
        if token.kind == "(":
            self.i += 1
            elements = []
            if self.peek().kind != ")":
                while True:
                    elements.append(self.macro_value())
                    if self.peek().kind == ",":
                        self.i += 1
                        if self.peek().kind == ")":
                            break
                    elif self.peek().kind == ")":
                        break
                    else:
                        self.error("Expect , or ) in tuple")
            self.i += 1
            return "tuple", elements
        self.error("Expect string, integer, boolean, or tuple in macro argument")

    def tag_dispatch(self):
        at = self.peek()
        self.i += 1
        positional, named = self.macro_arguments()
        for key in named:
            if key not in ("loop_after_dispatch", "excludes"):
                self.error("Unknown named argument for TagDispatch: " + key, at)
        triggers = []
        for kind, value in positional:
            if kind != "tuple":
                self.error("Each tag dispatch element must be a tuple", at)
            if len(value) != 2:
                self.error("Each tag dispatch element must be a pair (tag, rule)", at)
            (tag_kind, tag), (rule_kind, rule) = value
            if tag_kind != "string" or not tag:
                self.error("Tag must be a non-empty string literal", at)
            if rule_kind != "identifier":
                self.error("Rule reference must be an identifier", at)
            if rule not in self.names:
                self.error('Rule "%s" is not defined' % rule, at)
            triggers.append(("".join(chr(cp) for cp in tag), self.names[rule]))
        loop = True
        if "loop_after_dispatch" in named:
            kind, value = named["loop_after_dispatch"]
            if kind != "boolean":
                self.error("loop_after_dispatch must be a boolean literal", at)
            loop = value
        excludes = []
        if "excludes" in named:
            kind, value = named["excludes"]
            if kind != "tuple":
                self.error("excludes must be a tuple", at)
            for element_kind, element in value:
                if element_kind != "string" or not element:
                    self.error("Exclude must be a non-empty string literal", at)
                excludes.append("".join(chr(cp) for cp in element))
        for exclude in excludes:
            for trigger, _ in triggers:
                if trigger.startswith(exclude):
                    self.error("Exclude string must not be a prefix of trigger string: " + exclude, at)
        return dispatch_rules(self.rules, self.prefix + "-dispatch", triggers, loop, excludes)

    def regex_macro(self):
        at = self.peek()
        self.i += 1
        positional, named = self.macro_arguments()
        if len(positional) != 1:
            self.error("Regex expects exactly one string argument", at)
        kind, value = positional[0]
        if kind != "string":
            self.error("Regex pattern must be a string literal", at)
        if named:
            self.error("Regex's named arguments (%s) are not supported" % ", ".join(sorted(named)), at)
        pattern = "".join(chr(cp) for cp in value)
        return EbnfTranslator(self.rules).translate(regex_to_ebnf(pattern), prefix=self.prefix + "-regex")


def _merge(ranges):
    out = []
    for first, last in sorted(ranges):
        if out and first <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], last))
        else:
            out.append((first, last))
    return out


# -- XGrammar's regex dialect


_REGEX_ESCAPES = {c: ord(c) for c in "^$.*+?\\()[]{}|/"}
_REGEX_CLASS_ESCAPES = dict(_REGEX_ESCAPES, **{"-": 0x2D})


def _xg_escape(cp):
    """XGrammar's EscapeString of one code point (what its regex converter writes into EBNF)."""
    named = {0x27: "\\'", 0x22: '\\"', 0x3F: "\\?", 0x5C: "\\\\", 0x07: "\\a", 0x08: "\\b", 0x0C: "\\f",
             0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t", 0x0B: "\\v", 0x00: "\\0", 0x1B: "\\e"}  # fmt: skip
    if cp in named:
        return named[cp]
    if 0x20 <= cp <= 0x7E:
        return chr(cp)
    if cp <= 0xFF:
        return "\\x%02x" % cp
    if cp <= 0xFFFF:
        return "\\u%04x" % cp
    return "\\U%08x" % cp


class _RegexConverter:
    def __init__(self, pattern):
        self.s = pattern
        self.i = 0
        self.out = ""
        self.level = 0

    def error(self, message):
        raise XGrammarSyntaxError("Regex parsing error at position %d: %s" % (self.i + 1, message))

    def at(self, k=0):
        j = self.i + k
        return self.s[j] if j < len(self.s) else ""

    def add(self, segment):
        if self.out:
            self.out += " "
        self.out += segment

    def char_escape(self, escapes):
        rest = len(self.s) - self.i
        nxt = self.at(1)
        if rest < 2 or (nxt == "u" and rest < 5) or (nxt == "x" and rest < 4) or (nxt == "c" and rest < 3):
            self.error("Escape sequence is not finished.")
        parsed = _parse_escape(self.s, self.i, escapes)
        if parsed is not None:
            cp, n = parsed
            self.i += n
            if cp > _MAX_CODE_POINT:
                self.error("code point U+%X is past U+10FFFF" % cp)
            return _xg_escape(cp)
        if nxt == "u" and self.at(2) == "{":
            self.i += 3
            n, value = 0, 0
            while self.at(n) and self.at(n) in _HEX and n <= 6:
                value = value * 16 + int(self.at(n), 16)
                n += 1
            if n == 0 or n > 6 or self.at(n) != "}":
                self.error("Invalid Unicode escape sequence.")
            self.i += n + 1
            if value > _MAX_CODE_POINT:
                self.error("code point U+%X is past U+10FFFF" % value)
            return _xg_escape(value)
        if nxt == "c":
            self.i += 2
            if not self.at().isalpha() or not self.at().isascii():
                self.error("Invalid control character escape sequence.")
            self.i += 1
            return _xg_escape(ord(self.s[self.i - 1]) % 32)
        self.i += 2
        return _xg_escape(ord(self.s[self.i - 1]))

    def escape_in_class(self):
        if len(self.s) - self.i < 2:
            self.error("Escape sequence is not finished.")
        sets = {
            "d": "0-9",
            "D": "\\x00-\\x2F\\x3A-\\U0010FFFF",
            "w": "a-zA-Z0-9_",
            "W": "\\x00-\\x2F\\x3A-\\x40\\x5B-\\x5E\\x60\\x7B-\\U0010FFFF",
            "s": "\\f\\n\\r\\t\\v\\u0020\\u00a0",
            "S": "\\x00-\\x08\\x0E-\\x1F\\x21-\\x9F\\xA1-\\U0010FFFF",
        }
        if self.at(1) in sets and self.at(1):
            self.i += 2
            return sets[self.s[self.i - 1]]
        text = self.char_escape(_REGEX_CLASS_ESCAPES)
        return "\\" + text if text in ("]", "-") else text

    def escape(self):
        if len(self.s) - self.i < 2:
            self.error("Escape sequence is not finished.")
        e = self.at(1)
        sets = {
            "d": "[0-9]",
            "D": "[^0-9]",
            "w": "[a-zA-Z0-9_]",
            "W": "[^a-zA-Z0-9_]",
            "s": "[\\f\\n\\r\\t\\v\\u0020\\u00a0]",
            "S": "[^\\f\\n\\r\\t\\v\\u0020\\u00a0]",
        }
        if e in sets and e:
            self.i += 2
            return sets[e]
        if "1" <= e <= "9" or e == "k":
            self.error("Backreference is not supported yet.")
        if e in ("p", "P"):
            self.error("Unicode character class escape sequence is not supported yet.")
        if e in ("b", "B"):
            self.error("Word boundary is not supported yet.")
        return '"' + self.char_escape(_REGEX_ESCAPES) + '"'

    def char_class(self):
        text = "["
        self.i += 1
        if self.at() == "]":
            self.error("Empty character class is not allowed in regex.")
        while self.at() != "]" and self.i < len(self.s):
            if self.at() == "\\":
                text += self.escape_in_class()
            else:
                text += self.at()
                self.i += 1
        if self.i >= len(self.s):
            self.error("Unclosed '['")
        self.i += 1
        return text + "]"

    def repetition_range(self):
        text = "{"
        self.i += 1
        if not self.at().isdigit() or not self.at().isascii():
            self.error("Invalid repetition count.")
        while self.at() and self.at() in "0123456789":
            text += self.at()
            self.i += 1
        if self.at() not in (",", "}") or not self.at():
            self.error("Invalid repetition count.")
        text += self.at()
        self.i += 1
        if text[-1] == "}":
            return text
        if not (self.at() and self.at() in "0123456789") and self.at() != "}":
            self.error("Invalid repetition count.")
        while self.at() and self.at() in "0123456789":
            text += self.at()
            self.i += 1
        if self.at() != "}":
            self.error("Invalid repetition count.")
        self.i += 1
        return text + "}"

    def group_modifier(self):
        if self.i >= len(self.s):
            self.error("Group modifier is not finished.")
        c = self.at()
        if c == ":":
            self.i += 1
        elif c in ("=", "!"):
            self.error("Lookahead is not supported yet.")
        elif c == "<" and self.at(1) in ("=", "!") and self.at(1):
            self.error("Lookbehind is not supported yet.")
        elif c == "<":
            self.i += 1
            while self.at() and self.at().isascii() and self.at().isalpha():
                self.i += 1
            if self.at() != ">":
                self.error("Invalid named capturing group.")
            self.i += 1
        else:
            self.error("Group modifier flag is not supported yet.")

    def convert(self):
        empty = True
        n = len(self.s)
        while self.i < n:
            c = self.s[self.i]
            if c in "^$":
                self.i += 1
            elif c == "[":
                empty = False
                self.add(self.char_class())
            elif c == "(":
                empty = False
                self.i += 1
                self.level += 1
                self.add("(")
                if self.at() == "?":
                    self.i += 1
                    self.group_modifier()
            elif c == ")":
                empty = False
                if self.level == 0:
                    self.error("Unmatched ')'")
                if self.out.endswith("|"):
                    self.add('""')
                self.level -= 1
                self.add(")")
                self.i += 1
            elif c in "*+?":
                empty = False
                self.out += c
                self.i += 1
                if self.at() == "?":
                    self.i += 1
                if self.at() and self.at() in "{*+?":
                    self.error("Two consecutive repetition modifiers are not allowed.")
            elif c == "{":
                empty = False
                self.out += self.repetition_range()
                if self.at() == "?":
                    self.i += 1
                if self.at() and self.at() in "{*+?":
                    self.error("Two consecutive repetition modifiers are not allowed.")
            elif c == "|":
                empty = False
                if not self.out or self.out[-1] in "|(":
                    self.add('""')
                self.add("|")
                self.i += 1
            elif c == "\\":
                empty = False
                self.add(self.escape())
            elif c == ".":
                empty = False
                self.add("[\\u0000-\\U0010FFFF]")
                self.i += 1
            else:
                empty = False
                self.add('"' + _xg_escape(ord(c)) + '"')
                self.i += 1
        if self.level != 0:
            self.error("The parenthesis is not closed.")
        if self.out.endswith("|"):
            self.add('""')
        if empty:
            self.add('""')
        return self.out


def regex_to_ebnf(pattern):
    """XGrammar's EBNF for a regex of its dialect (``RegexToEBNF``), as one ``root`` rule."""
    if "\0" in pattern:
        raise XGrammarSyntaxError("The regex must not contain null characters.")
    if any(0xD800 <= ord(c) <= 0xDFFF for c in pattern):
        raise XGrammarSyntaxError("The regex is not a valid UTF-8 string.")
    return "root ::= " + _RegexConverter(pattern).convert() + "\n"
