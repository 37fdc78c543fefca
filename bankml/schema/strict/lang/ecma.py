# cython: boundscheck=True, wraparound=True, cdivision=False, annotation_typing=False
"""ECMA-262 regexes (JSON Schema's dialect, with the ``u`` flag's code-point semantics) as Python ``re`` patterns
of the same language: ``to_python(pattern)``, which the strict compiler applies to every ``pattern`` and
``patternProperties`` key before the rest of the pipeline (``regex``) reads them as Python's.

What changes between the dialects, and how it is written for ``re`` (the pattern runs under ``(?a)``, so that
``\\b`` and ``\\B`` look at ECMA's word characters):

* ``\\d`` = ``[0-9]``, ``\\w`` = ``[A-Za-z0-9_]``, ``\\s`` = ECMA's WhiteSpace and LineTerminator (U+0009-U+000D,
  U+0020, U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000, U+FEFF), and their complements,
  in and out of classes;
* ``.`` excludes the line terminators ``\\n \\r`` U+2028 U+2029; ``$`` is the end of the input only (Python's
  also matches before a final ``\\n``);
* ``\\cX`` (a control character), ``\\0``, ``\\u{...}``, ``\\uXXXX`` (a surrogate pair is one code point),
  ``(?<name>...)``; ``[^]`` (any character) and ``[]`` (none);
* read as Annex B reads them (the ``u`` flag alone would reject them; schemas write them, and every ECMA-262
  engine that takes them reads them so): a lone ``{``, ``}`` or ``]``, and an identity escape of ASCII
  punctuation (``\\:``, ``\\-``, ``\\_``, ``\\@``), each the character itself;
* refused, naming the construct: alphanumeric escapes ECMA-262 does not have (``\\a``, ``\\z``, ``\\Z``, ``\\A``...),
  Python's ``(?P...)`` and inline flags, Unicode property escapes ``\\p{...}`` (not built here), named
  backreferences.

Owns: the translation. Imports only ``bounds`` (``LangError``).
"""

from __future__ import annotations

import functools
import re

from bankml.schema.strict.lang.bounds import LangError

_WS = "\\t\\n\\x0b\\x0c\\r \\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff"
_WS_NOT = (
    "\\x00-\\x08\\x0e-\\x1f\\x21-\\x9f\\xa1-\\u167f\\u1681-\\u1fff\\u200b-\\u2027\\u202a-\\u202e"
    "\\u2030-\\u205e\\u2060-\\u2fff\\u3001-\\ufefe\\uff00-\\U0010ffff"
)
_IN_CLASS = {
    "d": "0-9",
    "D": "\\x00-/:-\\U0010ffff",
    "w": "A-Za-z0-9_",
    "W": "\\x00-/:-@\\[-^`{-\\U0010ffff",
    "s": _WS,
    "S": _WS_NOT,
}
_CONTROL = {"t": "\\t", "n": "\\n", "v": "\\x0b", "f": "\\x0c", "r": "\\r"}
_SYNTAX = set("^$\\.*+?()[]{}|/")
_DOT = "[^\\n\\r\\u2028\\u2029]"
_QUANTIFIER = re.compile(r"\{[0-9]+(?:,[0-9]*)?\}")


@functools.lru_cache(maxsize=1024)
def to_python(pattern: str, keyword: str = "pattern") -> str:
    """The Python ``re`` pattern whose ``re.search`` matches the strings the ECMA-262 pattern (``u`` flag)
    matches; LangError naming ``keyword`` for a pattern that is no ECMA-262 regex or has what is not built."""
    return "(?a)" + _Translator(pattern, keyword).run()


class _Translator:
    def __init__(self, pattern, keyword):
        self.p, self.i, self.keyword = pattern, 0, keyword

    def refuse(self, what):
        raise LangError(self.keyword, "%s (at %d) is not an ECMA-262 regex construct built here" % (what, self.i))

    def run(self):
        out, p = [], self.p
        while self.i < len(p):
            c = p[self.i]
            if c == "\\":
                out.append(self.escape(False))
            elif c == "[":
                out.append(self.klass())
            elif c == ".":
                self.i += 1
                out.append(_DOT)
            elif c == "$":
                self.i += 1
                out.append("\\Z")
            elif c == "(":
                out.append(self.group())
            elif c == "{" and out and _QUANTIFIER.match(p, self.i):
                q = _QUANTIFIER.match(p, self.i)
                self.i = q.end()
                out.append(q.group())
            elif c in "{}]":  # Annex B: a lone bracket is itself (the u flag alone would reject it)
                self.i += 1
                out.append("\\" + c)
            else:
                self.i += 1
                out.append(c)
        return "".join(out)

    def group(self):
        p, i = self.p, self.i
        if p.startswith("(?", i):
            nxt = p[i + 2 : i + 3]
            if nxt in (":", "=", "!") or p.startswith("(?<=", i) or p.startswith("(?<!", i):
                self.i += 3 if nxt != "<" else 4
                return p[i : self.i]
            if nxt == "<":
                end = p.find(">", i)
                name = p[i + 3 : end] if end > 0 else ""
                if not name.isidentifier():
                    self.refuse("a group name %r" % name)
                self.i = end + 1
                return "(?P<%s>" % name
            self.refuse("the group syntax %r" % p[i : i + 4])
        self.i += 1
        return "("

    def code_point(self):
        """The code point of an escape at self.i (past the backslash) that is one, or None."""
        p, i = self.p, self.i
        c = p[i : i + 1]
        if c in _CONTROL:
            self.i += 1
            return ord({"t": "\t", "n": "\n", "v": "\v", "f": "\f", "r": "\r"}[c])
        if c == "c":
            x = p[i + 1 : i + 2]
            if not ("a" <= x.lower() <= "z" and x.isascii()):
                self.refuse("\\c without a letter")
            self.i += 2
            return ord(x) % 32
        if c == "0" and not p[i + 1 : i + 2].isdigit():
            self.i += 1
            return 0
        if c == "x":
            h = p[i + 1 : i + 3]
            if len(h) != 2 or not _is_hex(h):
                self.refuse("\\x without two hex digits")
            self.i += 3
            return int(h, 16)
        if c == "u":
            if p[i + 1 : i + 2] == "{":
                end = p.find("}", i)
                h = p[i + 2 : end] if end > 0 else ""
                if not h or not _is_hex(h) or int(h, 16) > 0x10FFFF:
                    self.refuse("\\u{...} without a code point")
                self.i = end + 1
                return int(h, 16)
            h = p[i + 1 : i + 5]
            if len(h) != 4 or not _is_hex(h):
                self.refuse("\\u without four hex digits")
            self.i += 5
            cp = int(h, 16)
            lo = p[self.i + 2 : self.i + 6]
            if 0xD800 <= cp <= 0xDBFF and p.startswith("\\u", self.i) and len(lo) == 4 and _is_hex(lo):
                low = int(lo, 16)
                if 0xDC00 <= low <= 0xDFFF:
                    self.i += 6
                    return 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00)
            return cp
        if c in _SYNTAX or c == "-":
            self.i += 1
            return ord(c)
        return None

    def escape(self, in_class):
        """The Python text of the escape at self.i (a backslash)."""
        self.i += 1
        p, i = self.p, self.i
        c = p[i : i + 1]
        if not c:
            self.refuse("a trailing backslash")
        if c in _IN_CLASS:
            self.i += 1
            return _IN_CLASS[c] if in_class else "[%s]" % _IN_CLASS[c]
        if c == "b" and in_class:
            self.i += 1
            return "\\x08"
        if c in "bB":
            self.i += 1
            return "\\" + c
        cp = self.code_point()
        if cp is not None:
            return "\\U%08x" % cp
        if c.isdigit() and c != "0":
            j = i
            while j < len(p) and p[j].isdigit():
                j += 1
            self.i = j
            return "\\" + p[i:j]  # a backreference: not a regular language (regex refuses it)
        if c.isascii() and not c.isalnum():
            self.i += 1  # Annex B: an identity escape of punctuation is the character itself
            return "\\U%08x" % ord(c)
        if c in "pP":
            self.refuse("the Unicode property escape \\%s" % c)
        if c == "k":
            self.refuse("the named backreference \\k")
        self.refuse("the escape \\%s" % c)

    def klass(self):
        p = self.p
        self.i += 1
        negated = p[self.i : self.i + 1] == "^"
        if negated:
            self.i += 1
        if p[self.i : self.i + 1] == "]":
            self.i += 1
            return "[\\x00-\\U0010ffff]" if negated else "[^\\x00-\\U0010ffff]"
        parts = []
        while True:
            if self.i >= len(p):
                self.refuse("an unterminated class")
            c = p[self.i]
            if c == "]":
                self.i += 1
                break
            if c == "\\":
                parts.append(self.escape(True))
            elif c == "-":
                self.i += 1
                parts.append("-")
            else:
                self.i += 1
                parts.append("\\U%08x" % ord(c))
        return "[" + ("^" if negated else "") + "".join(parts) + "]"


def _is_hex(s):
    return all(ch in "0123456789abcdefABCDEF" for ch in s)
