# cython: boundscheck=True, wraparound=True, cdivision=False, annotation_typing=False
"""GBNF of a string language: ``string_gbnf`` writes the whole quoted JSON text of a string whose decoded value is
in a ``Lang``, in every JSON encoding of every character (the package's docstring); ``charset_gbnf`` writes one
character of a set, and is shared with the strict compiler's string rules.

Owns: the GBNF spelling of code points, classes and hex escapes, and the process-wide caches of a charset's GBNF.
Builds on ``automaton`` and ``charsets``; imports nothing above them.
"""

from __future__ import annotations

import re

from bankml.schema.strict.lang.automaton import Lang
from bankml.schema.strict.lang.charsets import MAXCP, SUR_HI, SUR_LO, UNIVERSE, cs_diff, cs_has, cs_inter, norm_sorted

# Characters JSON lets a string hold unescaped.
_RAW_OK = cs_diff(UNIVERSE, ((0, 0x1F), (0x22, 0x22), (0x5C, 0x5C)))
# Short escapes: decoded code point -> the letter after the backslash.
_SHORT_ESC = {0x22: '"', 0x5C: "\\", 0x2F: "/", 0x08: "b", 0x0C: "f", 0x0A: "n", 0x0D: "r", 0x09: "t"}
_HEX_FULL = "[0-9a-fA-F]"


def _gbnf_cp(c: int) -> str:
    """One code point inside a GBNF class or string literal."""
    if 0x30 <= c <= 0x39 or 0x41 <= c <= 0x5A or 0x61 <= c <= 0x7A:
        return chr(c)
    if c <= 0xFFFF:
        return "\\u%04X" % c
    return "\\U%08X" % c


def _gbnf_class(cs, admit_surrogates: bool = False) -> str:
    """A GBNF class for the code points of cs, negated (``[^...]``, listing the surrogates too,
    which no UTF-8 text holds) when that is shorter.  With ``admit_surrogates`` the class also
    takes U+D800..U+DFFF wherever that makes it simpler (ranges joined across the gap, negated
    classes not listing them)."""
    if admit_surrogates:
        joined: list = []
        for lo, hi in cs:
            if joined and joined[-1][1] == SUR_LO - 1 and lo == SUR_HI + 1:
                joined[-1] = (joined[-1][0], hi)
            else:
                joined.append((lo, hi))
        cs = tuple(joined)
    pos = _gbnf_class_body(cs)
    gaps = []
    prev = 0
    for lo, hi in cs:
        if lo > prev:
            gaps.append((prev, lo - 1))
        prev = hi + 1
    if prev <= MAXCP:
        gaps.append((prev, MAXCP))
    if not admit_surrogates:
        comp = _plain_ranges(gaps + [(SUR_LO, SUR_HI)])
    else:
        comp = _cs_diff_plain(gaps, ((SUR_LO, SUR_HI),))
    neg = _gbnf_class_body(comp) if comp else None
    if neg is not None and len(neg) < len(pos):
        return "[^" + neg + "]"
    return "[" + pos + "]"


def _cs_diff_plain(a, b) -> tuple:
    out = []
    for lo, hi in a:
        pieces = [(lo, hi)]
        for blo, bhi in b:
            nxt = []
            for x, y in pieces:
                if bhi < x or blo > y:
                    nxt.append((x, y))
                    continue
                if x < blo:
                    nxt.append((x, blo - 1))
                if y > bhi:
                    nxt.append((bhi + 1, y))
            pieces = nxt
        out.extend(pieces)
    return tuple(out)


def _gbnf_class_body(cs) -> str:
    parts = []
    for lo, hi in cs:
        if lo == hi:
            parts.append(_gbnf_cp(lo))
        elif hi == lo + 1:
            parts.append(_gbnf_cp(lo) + _gbnf_cp(hi))
        else:
            parts.append(_gbnf_cp(lo) + "-" + _gbnf_cp(hi))
    return "".join(parts)


def _hex_digit_class(values) -> str:
    """A class of hex digits with the given values (0..15), letters in both cases."""
    vals = sorted(values)
    if vals == list(range(16)):
        return _HEX_FULL
    ranges: list[list[int]] = []
    for v in vals:
        if ranges and ranges[-1][1] + 1 == v:
            ranges[-1][1] = v
        else:
            ranges.append([v, v])
    digits = []
    letters = []
    for lo, hi in ranges:
        if lo <= 9:
            digits.append((lo, min(hi, 9)))
        if hi >= 10:
            letters.append((max(lo, 10), hi))
    out = []
    for lo, hi in digits:
        out.append(str(lo) if lo == hi else "%d-%d" % (lo, hi))
    for base in ("a", "A"):
        for lo, hi in letters:
            a, b = chr(ord(base) + lo - 10), chr(ord(base) + hi - 10)
            out.append(a if lo == hi else a + "-" + b)
    if len(vals) == 1 and vals[0] <= 9:
        return '"%d"' % vals[0]
    return "[" + "".join(out) + "]"


def _hex_expr(ranges: tuple, k: int, memo: dict) -> str:
    """GBNF for the k-hex-digit strings (either case) whose value lies in ``ranges`` (None for no range: no
    caller asks for it, each passes the ranges of a set it found non-empty)."""
    if not ranges:
        return None  # type: ignore[return-value]
    key = (ranges, k)
    got = memo.get(key)
    if got is not None:
        return got
    size = 16**k
    if ranges == ((0, size - 1),):
        out = " ".join([_HEX_FULL] * k)
    else:
        step = size // 16
        # the ranges split at the leading digit's boundaries, relative to their digit's base, in one pass
        buckets: dict = {}
        for lo, hi in ranges:
            d, d1 = lo // step, hi // step
            while d < d1:
                buckets.setdefault(d, []).append((lo - d * step, step - 1))
                d += 1
                lo = d * step
            buckets.setdefault(d, []).append((lo - d * step, hi - d * step))
        groups: dict = {}
        order = []
        for d, sub in buckets.items():
            rel = tuple(sub)
            e = _hex_expr(rel, k - 1, memo) if k > 1 else ""
            if e not in groups:
                groups[e] = []
                order.append(e)
            groups[e].append(d)
        alts = []
        for e in order:
            cls = _hex_digit_class(groups[e])
            alts.append((cls + " " + e).strip())
        out = alts[0] if len(alts) == 1 else "( " + " | ".join(alts) + " )"
    memo[key] = out
    return out


def _plain_ranges(cs) -> tuple:
    """Ranges over plain integers (no surrogate clipping), merged."""
    out: list[list[int]] = []
    for lo, hi in sorted(cs):
        if out and lo <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return tuple((a, b) for a, b in out)


# The GBNF of a character set, shared by every conversion of the process: the same sets (any character but
# '"', a pattern's classes, a format's) come back in schema after schema. Both caches are bounded: past their
# size they start again empty.
_CHARSET_GBNF: dict = {}
_HEX_MEMO: dict = {}
_CHARSET_CACHE_MAX = 4096
_HEX_MEMO_MAX = 200_000


def charset_gbnf(cs, admit_surrogates: bool = False, canonical: bool = False) -> str:
    """The alternatives of ``_charset_alts`` (``canonical``: of ``_canonical_alts``) joined into one rule body,
    from the process-wide cache."""
    key = (cs, admit_surrogates, canonical)
    got = _CHARSET_GBNF.get(key)
    if got is None:
        if len(_CHARSET_GBNF) >= _CHARSET_CACHE_MAX:
            _CHARSET_GBNF.clear()
        if len(_HEX_MEMO) >= _HEX_MEMO_MAX:
            _HEX_MEMO.clear()
        if canonical:
            alts = _canonical_alts(cs, admit_surrogates)
        else:
            alts = _charset_alts(cs, _HEX_MEMO, admit_surrogates)
        got = _CHARSET_GBNF[key] = " | ".join(alts)
    return got


# The canonical spelling of the characters JSON must escape (``json.dumps``'s): a short escape where JSON has one,
# else ``\u00`` and two lowercase hex digits. Every other character is written raw.
_CANONICAL_SHORT = {0x22: '"', 0x5C: "\\", 0x08: "b", 0x0C: "f", 0x0A: "n", 0x0D: "r", 0x09: "t"}


def _canonical_alts(cs, admit_surrogates: bool = False) -> list[str]:
    """The canonical spelling of one character of ``cs``, as GBNF alternatives: raw, or the one escape JSON
    requires (``_CANONICAL_SHORT``, ``\\u00xx``)."""
    alts = []
    raw = cs_inter(cs, _RAW_OK)
    if raw:
        alts.append(_gbnf_class(raw, admit_surrogates))
    short = sorted(_CANONICAL_SHORT[c] for c in _CANONICAL_SHORT if cs_has(cs, c))
    by_high: dict = {}  # the control characters without a short escape, by their high hex digit
    for c in range(0x20):
        if c not in _CANONICAL_SHORT and cs_has(cs, c):
            by_high.setdefault(c >> 4, []).append("%x" % (c & 15))
    escapes = []
    if short:
        body = "".join("\\\\" if ch == "\\" else ('\\"' if ch == '"' else ch) for ch in short)
        escapes.append("[" + body + "]")
    if by_high:
        u = ['"%d" [%s]' % (h, "".join(lows)) for h, lows in sorted(by_high.items())]
        escapes.append('"u00" ' + (u[0] if len(u) == 1 else "( " + " | ".join(u) + " )"))
    if escapes:
        alts.append('"\\\\" ' + (escapes[0] if len(escapes) == 1 else "( " + " | ".join(escapes) + " )"))
    return alts


def _charset_alts(cs, memo: dict, admit_surrogates: bool = False) -> list[str]:
    """Every JSON encoding of one character of ``cs``, as GBNF alternatives."""
    alts = []
    raw = cs_inter(cs, _RAW_OK)
    if raw:
        alts.append(_gbnf_class(raw, admit_surrogates))
    # The escapes after one backslash, and the \u ones after one "u": a character set of many surrogate-pair
    # groups (Python's \w) would otherwise put as many stacks on a backslash, each of them stepped on every
    # character (the language is the same).
    short = sorted(_SHORT_ESC[c] for c in _SHORT_ESC if cs_has(cs, c))
    short_expr = None
    if short:
        body = "".join("\\\\" if ch == "\\" else ('\\"' if ch == '"' else ch) for ch in short)
        short_expr = "[" + body + "]" if len(short) > 1 else '"' + body + '"'
    u_alts = []
    bmp = cs_inter(cs, ((0, 0xFFFF),))
    if bmp:
        u_alts.append(_hex_expr(_plain_ranges(bmp), 4, memo))
    # Above U+FFFF: surrogate pairs; group high surrogates that take the same low ones.
    # A high surrogate whose whole block of 1,024 is in the set takes every low one: such blocks are kept as
    # runs (h0, h1), so a wide range costs two partial blocks, not one entry per block.
    partial: dict = {}  # high surrogate index -> low ranges
    runs = []  # (first, last) high surrogate indexes of whole blocks
    for lo, hi in cs_inter(cs, ((0x10000, MAXCP),)):
        h0, h1 = (lo - 0x10000) >> 10, (hi - 0x10000) >> 10
        f0 = h0 if (lo - 0x10000) & 0x3FF == 0 else h0 + 1
        f1 = h1 if (hi - 0x10000) & 0x3FF == 0x3FF else h1 - 1
        for h in (h0, h1) if h0 != h1 else (h0,):
            if f0 <= h <= f1:
                continue
            a = max(lo, 0x10000 + (h << 10)) - 0x10000 - (h << 10)
            b = min(hi, 0x10000 + (h << 10) + 0x3FF) - 0x10000 - (h << 10)
            partial.setdefault(h, []).append((0xDC00 + a, 0xDC00 + b))
        if f0 <= f1:
            runs.append((f0, f1))
    entries = [(h, h, _plain_ranges(r)) for h, r in partial.items()]
    entries += [(a, b, ((0xDC00, 0xDFFF),)) for a, b in runs]
    entries.sort()
    lows: dict = {}
    order = []
    for h0, h1, lk in entries:
        if lk not in lows:
            lows[lk] = []
            order.append(lk)
        lows[lk].append((0xD800 + h0, 0xD800 + h1))
    for lk in order:
        u_alts.append(_hex_expr(_plain_ranges(lows[lk]), 4, memo) + ' "\\\\u" ' + _hex_expr(lk, 4, memo))
    if len(u_alts) + (short_expr is not None) <= 1:
        if short_expr is not None:
            alts.append('"\\\\' + short_expr[1:] if short_expr[0] == '"' else '"\\\\" ' + short_expr)
        for u in u_alts:
            alts.append('"\\\\u" ' + u)
        return alts
    after_u = u_alts[0] if len(u_alts) == 1 else "( " + " | ".join(u_alts) + " )"
    escapes = ([short_expr] if short_expr is not None else []) + (['"u" ' + after_u] if u_alts else [])
    alts.append('"\\\\" ' + (escapes[0] if len(escapes) == 1 else "( " + " | ".join(escapes) + " )"))
    return alts


#: Deepest chain of single-use states written inline into one rule.
_MAX_INLINE = 16


def string_gbnf(
    lang: Lang, name: str, admit_surrogates: bool = False, canonical: bool = False
) -> tuple[str, dict[str, str]]:
    """GBNF for the whole quoted JSON string (quotes included) whose decoded value is in ``lang``.

    Returns ``(expression, rules)``: ``expression`` goes into a rule body; ``rules`` maps new rule
    names, each ``name + "-..."``, to their bodies.  Encoding policy: every JSON encoding of every
    character (see the package doc).  Layout: one rule ``name-cN`` per distinct character set
    (shared by all the edges over it: raw UTF-8 | short escape | ``\\uXXXX`` | surrogate pair),
    one rule ``name-sN`` per DFA state that more than one edge enters (or that loops); a state
    entered once is written inline in its predecessor's rule, and an accepting state's way out is
    the closing quote.  The empty language gives a rule that matches nothing: an empty char class
    ``[^\\u0000-\\U0010FFFF]``.

    ``admit_surrogates=True`` trades exactness on *invalid* UTF-8 for mask speed: raw classes then
    also take the surrogate code points U+D800..U+DFFF (the 3-byte sequences ED A0 80..ED BF BF,
    which no UTF-8 decoder accepts — a vocabulary may hold tokens with them) wherever that makes a
    class simpler.  bankml's mask engine has a fast path for classes that treat every code point
    >= 0x80 alike; a class that excludes the surrogates misses it (measured on the llama-3
    vocabulary, the first mask inside an any-string: ~16 ms exact vs ~0.3 ms admitting them).
    The valid-UTF-8 texts accepted are the same either way.

    ``canonical=True`` writes each character in its one canonical spelling instead (``_canonical_alts``: raw but
    for the escapes JSON requires), the strict compiler's canonical style: the same decoded strings.
    """
    if not re.fullmatch(r"[a-zA-Z0-9-]+", name):
        raise ValueError(f"bad GBNF rule name {name!r}")
    if lang.is_empty():
        return name + "-none", {name + "-none": "[^\\u0000-\\U0010FFFF]"}
    return _StringRules(lang, name, admit_surrogates, canonical=canonical).write()


class _StringRules:
    """The rules string_gbnf writes for one language (its layout: string_gbnf's docstring)."""

    def __init__(self, lang: Lang, name: str, admit_surrogates: bool, end: str = '"\\""', canonical: bool = False):
        self.lang, self.name, self.admit_surrogates, self.end = lang, name, admit_surrogates, end
        self.canonical = canonical
        self.rules: dict[str, str] = {}
        self.cs_rule: dict = {}
        n = lang.n_states
        self.groups = []  # per state: [(target, charset)] in order of first range
        refs = [0] * n
        refs[0] += 1
        for s in range(n):
            by_t: dict = {}
            order = []
            for lo, hi, t in lang._trans[s]:
                if t not in by_t:
                    by_t[t] = []
                    order.append(t)
                by_t[t].append((lo, hi))
            self.groups.append([(t, norm_sorted(by_t[t])) for t in order])
            for t in order:
                refs[t] += 1
        self.named = [refs[s] != 1 for s in range(n)]
        self.named[0] = True
        self.todo = [t for t in range(n - 1, -1, -1) if self.named[t]]  # every named state gets its rule, 0 first

    def write(self) -> tuple[str, dict[str, str]]:
        done = set()
        while self.todo:
            s = self.todo.pop()
            if s in done:
                continue
            done.add(s)
            self.rules[f"{self.name}-s{s}"] = " | ".join(self.body(s, 0))
        # Rules for states later forced to be named by the depth cap are emitted by the loop above.
        return '"\\"" ' + f"{self.name}-s0", self.rules

    def charset_ref(self, cs) -> str:
        ref = self.cs_rule.get(cs)
        if ref is None:
            ref = self.cs_rule[cs] = f"{self.name}-c{len(self.cs_rule)}"
            self.rules[ref] = charset_gbnf(cs, self.admit_surrogates, self.canonical)
        return ref

    def body(self, s: int, depth: int) -> list[str]:
        alts = []
        for t, cs in self.groups[s]:
            alts.append(self.charset_ref(cs) + " " + self.target(t, depth))
        if self.lang._acc[s]:
            alts.append(self.end)
        return alts

    def target(self, t: int, depth: int) -> str:
        if self.named[t] or depth >= _MAX_INLINE:
            if not self.named[t]:
                self.named[t] = True
                self.todo.append(t)
            return f"{self.name}-s{t}"
        alts = self.body(t, depth + 1)
        return alts[0] if len(alts) == 1 else "( " + " | ".join(alts) + " )"


def piece_gbnf(lang: Lang, name: str, end: str) -> tuple[str, dict[str, str]]:
    """The rules of ``lang``'s strings (every spelling, as string_gbnf writes them) without the opening quote,
    each accepting state's way out ``end`` (an expression) instead of the closing quote: ``(start rule, rules)``,
    for a grammar written of parts (``time_gbnf``). ``lang`` must not be empty."""
    if not re.fullmatch(r"[a-zA-Z0-9-]+", name):
        raise ValueError(f"bad GBNF rule name {name!r}")
    expr, rules = _StringRules(lang, name, False, end).write()
    return expr.split(" ", 1)[1], rules
