"""Ports semantics of XGrammar (https://github.com/mlc-ai/xgrammar), Apache License 2.0, Copyright (c) 2024 by Contributors.

XGrammar's EBNF dialect (``grammar_parser.cc``) translated to llama.cpp GBNF rules under a prefix
(``EbnfTranslator``): rule names with ``_ . -``, C escapes and ``\\x`` of any length in strings and classes, ``()``
as the empty string, ``{m,n}``, ``TagDispatch(...)`` (``xgrammar_lang.dispatch_rules``) and ``Regex("...")``
(``xgrammar_regex``). Refused, naming the construct: lookahead assertions (``(= ...)``: XGrammar enforces them,
GBNF cannot), rule attributes (``name[max_tokens=...]``), the token macros (``Token``, ``ExcludeToken``,
``TokenTagDispatch``), ``Substring`` and ``Regex``'s named arguments.

This module owns no JSON schema and no structural tag: it must not import them, nor any engine.
"""

from bankml.integrations.xgrammar_lang import (
    MAX_CODE_POINT,
    MAX_REPETITION,
    XGrammarSyntaxError,
    char_class,
    dispatch_rules,
    literal,
    parse_escape,
)
from bankml.integrations.xgrammar_regex import regex_to_ebnf

__all__ = ["EbnfTranslator"]

# nesting of parentheses and macro tuples: XGrammar allows 1,000; each level is four Python frames here, so
# bankml stops at 100 (well inside the interpreter's recursion limit on an engine's worker thread)
_MAX_NESTING = 100
_CLASS_ESCAPES = {c: ord(c) for c in "^$\\.*+?()[]{}|/-"}


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
                parsed = parse_escape(self.text, self.pos)
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
                    parsed = parse_escape(self.text, self.pos, _CLASS_ESCAPES)
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
                if cp > MAX_CODE_POINT or 0xD800 <= cp <= 0xDFFF:
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
            if last > MAX_CODE_POINT:
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
            self.depth += 1
            if self.depth > _MAX_NESTING:
                self.error("Nest layer exceeded the maximum limit")
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
            self.depth -= 1
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
