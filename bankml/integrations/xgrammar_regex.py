"""Ports semantics of XGrammar (https://github.com/mlc-ai/xgrammar), Apache License 2.0, Copyright (c) 2024 by Contributors.

XGrammar's regex dialect (``regex_converter.cc``) to its EBNF (``regex_to_ebnf``), which
``bankml.integrations.xgrammar_ebnf`` then reads, exactly as XGrammar compiles a regex (``Grammar.from_regex``
prints EBNF and parses it back): a whole match, ``^``/``$`` ignored, ``.`` any code point, lazy quantifiers as
greedy, ``\\d \\w \\s`` ASCII sets; the EBNF text is XGrammar's, character for character.

This module owns no JSON schema and no structural tag: it must not import them, nor any engine.
"""

from bankml.integrations.xgrammar_lang import HEX, MAX_CODE_POINT, XGrammarSyntaxError, parse_escape

__all__ = ["regex_to_ebnf"]


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
        parsed = parse_escape(self.s, self.i, escapes)
        if parsed is not None:
            cp, n = parsed
            self.i += n
            if cp > MAX_CODE_POINT:
                self.error("code point U+%X is past U+10FFFF" % cp)
            return _xg_escape(cp)
        if nxt == "u" and self.at(2) == "{":
            self.i += 3
            n, value = 0, 0
            while self.at(n) and self.at(n) in HEX and n <= 6:
                value = value * 16 + int(self.at(n), 16)
                n += 1
            if n == 0 or n > 6 or self.at(n) != "}":
                self.error("Invalid Unicode escape sequence.")
            self.i += n + 1
            if value > MAX_CODE_POINT:
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
