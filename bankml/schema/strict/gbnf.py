# cython: boundscheck=True, wraparound=True, cdivision=False, annotation_typing=False
"""GBNF text for the strict compiler's rules: literals, character classes, every JSON spelling of one code point
(``spell_char``), the hex digits of a ``\\uXXXX`` escape other than some (``hex_except_steps``, made once per
process), alternatives; and the fixed rules every strict grammar may refer to (``space``, ``char``, ``hex``,
``number``, ``integer``, ``value``...), written after the compiled ones.

Owns: the GBNF spelling. Imports nothing of the package.
"""

from __future__ import annotations

import re

SPACE_RULE = '| " " | "\\n"{1,2} [ \\t]{0,20}'
# one code point of a JSON string, in any of its spellings (see the module docstring)
CHAR_RULE = (
    '[^"\\\\\\x00-\\x1F] | "\\\\" ( ["\\\\/bfnrt] | "u" ( [0-9a-cA-CefEF] hex hex hex | [dD] [0-7] hex hex'
    ' | [dD] [89abAB] hex hex "\\\\u" [dD] [c-fC-F] hex hex ) )'
)
NUMBER_RULE = '"-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?'
INTEGER_RULE = '"-"? ( "0" | [1-9] [0-9]* )'
# matches nothing: a class of every code point, negated (the parser reads an empty class "[]" as matching
# the empty string)
NEVER = "[^\\x00-\\U0010FFFF]"
# a GBNF rule body's tokens: literals and character classes (their escapes inside), repetition bounds, names
GBNF_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]|\{[^}]*\}|[a-zA-Z0-9-]+|\s+|.', re.S)


def lit(s):
    """A GBNF literal of the text s."""
    out = ['"']
    for ch in s:
        o = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif o < 0x20 or o == 0x7F:
            out.append("\\x%02X" % o)
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _class_char(o):
    if o < 0x80 and (chr(o).isalnum()):
        return chr(o)
    if o <= 0xFF:
        return "\\x%02X" % o
    if o <= 0xFFFF:
        return "\\u%04X" % o
    return "\\U%08X" % o


_CLASS_CACHE: dict = {}


def char_class(cps, negate=False):
    """A GBNF character class of the code points cps (a set of ints)."""
    key = (frozenset(cps), negate)
    text = _CLASS_CACHE.get(key)
    if text is None:
        text = _char_class_text(cps, negate)
        if len(_CLASS_CACHE) > 4096:
            _CLASS_CACHE.clear()
        _CLASS_CACHE[key] = text
    return text


def _char_class_text(cps, negate):
    cps = sorted(cps)
    parts = []
    i = 0
    while i < len(cps):
        j = i
        while j + 1 < len(cps) and cps[j + 1] == cps[j] + 1:
            j += 1
        parts.append(_class_char(cps[i]) if i == j else _class_char(cps[i]) + "-" + _class_char(cps[j]))
        i = j + 1
    return "[" + ("^" if negate else "") + "".join(parts) + "]"


SHORT_ESC = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _hex_spell(v):
    """GBNF of the 4 hex digits of v, either case."""
    return " ".join("[" + c + c.upper() + "]" if c.isalpha() else lit(c) for c in "%04x" % v)


_HEX_DIGITS = "0123456789abcdef"
_HEX_STEPS: dict = {}


def _hex_class(hs):
    """The character class of the hex digits hs (lowercase), either case."""
    cps = set()
    for h in hs:
        cps.add(ord(h))
        cps.add(ord(h.upper()))
    return char_class(cps)


def hex_except_steps(ex):
    """The rules of ``Compiler.hex_except`` for ex (a frozenset of 4-digit lowercase hex strings), once per
    process: ``(steps, root)``. Each step is one rule's body, in the order the trie's nodes are finished, as
    parts: text, or the index of an earlier step (that rule's name once made). ``root`` is None (no code
    point), "" (none excluded) or the index of the step of the root's rule. The compiler makes the rules in
    this order with ``add_rule`` (one rule per distinct body), so the grammar is the one the trie walk would
    write: the walk is done once per set of excluded code points instead of once per trie node asking."""
    got = _HEX_STEPS.get(ex)
    if got is not None:
        return got
    prefixes = {e[:i] for e in ex for i in range(1, 5)}
    steps = []

    def node(prefix):
        depth = len(prefix)
        if depth == 4:
            return None if prefix in ex else ""
        free, alts = [], []
        for h in _HEX_DIGITS:
            p = prefix + h
            if len(p) == 2 and p[0] == "d" and h in "89abcdef":
                continue  # U+D800-U+DFFF: only as surrogate pairs
            if p == "d" or p in prefixes:
                sub = node(p)
                if sub is not None:
                    alts.append([_hex_class(h)] if sub == "" else [_hex_class(h) + " ", sub])
            else:
                free.append(h)
        if free:
            alts.append([_hex_class(free) + " hex" * (3 - depth)])
        if not alts:
            return None
        parts = []
        for i, alt in enumerate(alts):
            if i:
                parts.append(" | ")
            parts.extend(alt)
        steps.append(tuple(parts))
        return len(steps) - 1

    root = node("")
    # a recursive closure refers to itself: freed now, not by the collector
    node = None  # noqa: F841
    got = (tuple(steps), root)
    if len(_HEX_STEPS) > 4096:
        _HEX_STEPS.clear()
    _HEX_STEPS[ex] = got
    return got


def canonical_spelling(ch):
    """The one canonical spelling of a code point inside a JSON string: ``json.dumps(ch, ensure_ascii=False)``'s
    (raw, but ``\\"``, ``\\\\``, the short escapes of U+0008-U+000D's letters and ``\\u00xx`` for the other
    control characters)."""
    o = ord(ch)
    if ch == '"' or ch == "\\":
        return "\\" + ch
    if o < 0x20 or 0xD800 <= o <= 0xDFFF:  # a lone surrogate (a schema's key may hold one) has no raw UTF-8
        return SHORT_ESC.get(ch) or "\\u%04x" % o
    return ch


def spell_char(ch, canonical=False):
    """GBNF of every spelling of one code point inside a JSON string (module docstring), or of its canonical one."""
    if canonical:
        return "( " + lit(canonical_spelling(ch)) + " )"
    o = ord(ch)
    alts = []
    if o >= 0x20 and ch not in '"\\':
        alts.append(lit(ch))
    if ch in SHORT_ESC:
        alts.append(lit(SHORT_ESC[ch]))
    if o <= 0xFFFF:
        alts.append('"\\\\u" ' + _hex_spell(o))
    else:
        hi, lo = 0xD800 + ((o - 0x10000) >> 10), 0xDC00 + ((o - 0x10000) & 0x3FF)
        alts.append('"\\\\u" ' + _hex_spell(hi) + ' "\\\\u" ' + _hex_spell(lo))
    return "( " + " | ".join(alts) + " )"


def alternatives(xs):
    """The alternatives xs (None: no such text) as one GBNF expression, or None when there is none."""
    xs = [x for x in xs if x is not None]
    if not xs:
        return None
    return xs[0] if len(xs) == 1 else "( " + " | ".join(xs) + " )"


# any JSON value (the schema `true`), in the canonical string spelling
_VALUE_RULES = "\n".join(
    [
        'value ::= object | array | string | number | "true" | "false" | "null"',
        'object ::= "{" space ( string space ":" space value space ( "," space string space ":" space value space )* )? "}"',
        'array ::= "[" space ( value space ( "," space value space )* )? "]"',
        'string ::= "\\"" char* "\\""',
    ]
)

# the rules every compiled grammar may refer to by these names (after the compiled ones, in this order)
FIXED_RULES: dict[str, str] = {
    "space": SPACE_RULE,
    "char": CHAR_RULE,
    "hex": "[0-9a-fA-F]",
    "number": NUMBER_RULE,
    "integer": INTEGER_RULE,
}
# The canonical style's (``convert``'s style "canonical"): no whitespace, a code point in its one spelling
# (``canonical_spelling``: "\\u00" and lowercase hex for the control characters without a short escape), numbers
# with no exponent
CANONICAL_FIXED_RULES: dict[str, str] = {
    "space": '""',
    "char": '[^"\\\\\\x00-\\x1F] | "\\\\" ( ["\\\\bfnrt] | "u00" ( "0" [0-7bef] | "1" [0-9a-f] ) )',
    "hex": "[0-9a-fA-F]",
    "number": '"-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )?',
    "integer": INTEGER_RULE,
}
for _line in _VALUE_RULES.split("\n"):
    _name, _body = _line.split(" ::= ", 1)
    FIXED_RULES[_name] = _body
    CANONICAL_FIXED_RULES[_name] = _body
